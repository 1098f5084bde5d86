//! A throwaway PostgreSQL cluster for tests, benchmarks and development:
//! `initdb` into a fresh directory, `postgres` on a free loopback port, and
//! gone again when dropped — or when this process dies, since a watcher
//! process stops the cluster once our end of its pipe closes. It uses the
//! server binaries the machine has (PostgreSQL's `initdb` and `pg_ctl` on
//! `PATH` or under `/usr/lib/postgresql/*/bin`); nothing is downloaded.
//!
//! `initdb` refuses to run as root, so as root the cluster runs as the
//! `postgres` user (which Debian's package creates) through `runuser`.

use anyhow::{bail, Context};
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};

/// A running cluster. Connect with [`PgCluster::url`]; every database name
/// is free to create ([`PgCluster::create_database`]).
pub struct PgCluster {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
    /// A throwaway cluster does not sync its writes (`fsync=off`).
    fast: bool,
    as_postgres: bool,
    keep: bool,
    /// Our end of the watcher's stdin: closing it (drop, or this process
    /// exiting in any way) makes the watcher stop the cluster.
    watcher_stdin: Option<ChildStdin>,
    watcher: Option<Child>,
}

/// The directory holding `initdb`, `pg_ctl` and `postgres`, or why there is
/// none.
pub fn find_binaries() -> Result<PathBuf, String> {
    let has = |d: &Path| d.join("initdb").is_file() && d.join("pg_ctl").is_file();
    if let Ok(d) = std::env::var("SPACEWAKE_PG_BIN") {
        let d = PathBuf::from(d);
        return if has(&d) {
            Ok(d)
        } else {
            Err(format!(
                "SPACEWAKE_PG_BIN={} has no initdb/pg_ctl",
                d.display()
            ))
        };
    }
    for d in std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()) {
        if has(&d) {
            // Debian's /usr/bin wrappers want a cluster config; use the real ones.
            if let Ok(real) = std::fs::canonicalize(d.join("initdb")) {
                if let Some(p) = real.parent().filter(|p| has(p)) {
                    return Ok(p.to_path_buf());
                }
            }
            return Ok(d);
        }
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|d| has(d))
        .collect();
    found.sort();
    found.pop().ok_or_else(|| {
        "no PostgreSQL server binaries (initdb, pg_ctl) on PATH or under /usr/lib/postgresql; \
         install the distribution's postgresql package"
            .to_string()
    })
}

impl PgCluster {
    /// Creates and starts a cluster in a new directory under `parent`
    /// (the system's temporary directory when `None`).
    pub fn start(parent: Option<&Path>) -> anyhow::Result<PgCluster> {
        let parent = parent.map_or_else(std::env::temp_dir, Path::to_path_buf);
        let dir = parent.join(format!(
            "spacewake-pg-{}-{}",
            std::process::id(),
            crate::store::hex_id(&rand::random::<[u8; 4]>())
        ));
        let mut c = Self::init(dir, free_port()?, true)?;
        c.start_server()?;
        c.spawn_watcher()?;
        Ok(c)
    }

    /// A cluster for development in `dir`, kept after this process ends:
    /// created (on a free port, remembered in `dir/port`) the first time,
    /// started again later. Returns its URL. Unlike the throwaway ones it
    /// syncs its writes.
    pub fn start_kept(dir: &Path) -> anyhow::Result<String> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let dir = std::fs::canonicalize(dir)?;
        let port_file = dir.join("port");
        let mut c = if dir.join("data").join("PG_VERSION").is_file() {
            let port = std::fs::read_to_string(&port_file)
                .with_context(|| format!("reading {}", port_file.display()))?
                .trim()
                .parse()
                .with_context(|| format!("{} holds no port", port_file.display()))?;
            Self::attach(dir, port, false)?
        } else {
            let port = free_port()?;
            let c = Self::init(dir, port, false)?;
            std::fs::write(&port_file, port.to_string())?;
            c
        };
        let data = c.dir.join("data");
        let running = c
            .run(
                "pg_ctl",
                &["-D".as_ref(), data.as_os_str(), "status".as_ref()],
            )
            .is_ok();
        if !running {
            c.start_server()?;
        }
        let url = c.url("postgres");
        c.keep();
        Ok(url)
    }

    fn attach(dir: PathBuf, port: u16, fast: bool) -> anyhow::Result<PgCluster> {
        // SAFETY: geteuid has no preconditions.
        let as_postgres = unsafe { libc::geteuid() } == 0;
        Ok(PgCluster {
            dir,
            bin: find_binaries().map_err(anyhow::Error::msg)?,
            port,
            fast,
            as_postgres,
            keep: false,
            watcher_stdin: None,
            watcher: None,
        })
    }

    /// `initdb` into `dir/data`.
    fn init(dir: PathBuf, port: u16, fast: bool) -> anyhow::Result<PgCluster> {
        std::fs::create_dir_all(dir.join("data"))
            .with_context(|| format!("creating {}", dir.display()))?;
        let c = Self::attach(dir, port, fast)?;
        if c.as_postgres {
            let st = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&c.dir)
                .status()
                .context("running chown")?;
            if !st.success() {
                bail!("cannot hand {} to the postgres user", c.dir.display());
            }
        }
        let data = c.dir.join("data");
        c.run(
            "initdb",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-U".as_ref(),
                "postgres".as_ref(),
                "--auth=trust".as_ref(),
                "--no-sync".as_ref(),
                "-E".as_ref(),
                "UTF8".as_ref(),
                "--locale=C".as_ref(),
            ],
        )?;
        Ok(c)
    }

    /// Starts the server of an initialised cluster (also after [`stop`]).
    ///
    /// [`stop`]: PgCluster::stop
    pub fn start_server(&mut self) -> anyhow::Result<()> {
        let data = self.dir.join("data");
        let opts = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {} -c max_connections=200{}",
            self.port,
            self.dir.display(),
            if self.fast { " -c fsync=off" } else { "" }
        );
        let log = self.dir.join("server.log");
        self.run(
            "pg_ctl",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-o".as_ref(),
                opts.as_ref(),
                "-l".as_ref(),
                log.as_os_str(),
                "-w".as_ref(),
                "-t".as_ref(),
                "60".as_ref(),
                "start".as_ref(),
            ],
        )
    }

    /// Stops the server at once (`immediate`: as a crash would), keeping
    /// its data for [`PgCluster::start_server`].
    pub fn stop(&self) -> anyhow::Result<()> {
        self.pg_ctl_stop("immediate")
    }

    /// Stops a cluster [`PgCluster::start_kept`] started in `dir`, cleanly.
    pub fn stop_kept(dir: &Path) -> anyhow::Result<()> {
        let dir = std::fs::canonicalize(dir)?;
        let c = Self::attach(dir, 0, false)?;
        let r = c.pg_ctl_stop("fast");
        c.keep();
        r
    }

    fn pg_ctl_stop(&self, mode: &str) -> anyhow::Result<()> {
        let data = self.dir.join("data");
        self.run(
            "pg_ctl",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-m".as_ref(),
                mode.as_ref(),
                "-w".as_ref(),
                "stop".as_ref(),
            ],
        )
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A URL for database `db` as the superuser.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// Creates database `name` (no-op if it exists) and returns its URL.
    pub fn create_database(&self, name: &str) -> anyhow::Result<String> {
        let mut client = postgres::Client::connect(&self.url("postgres"), postgres::NoTls)
            .context("connecting to the throwaway cluster")?;
        let exists = client
            .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&name])?
            .is_some();
        if !exists {
            client.batch_execute(&format!("CREATE DATABASE \"{name}\""))?;
        }
        Ok(self.url(name))
    }

    /// Leaves the cluster running (and its directory) after this value and
    /// this process are gone: for `spacewake postgres`.
    pub fn keep(mut self) -> PathBuf {
        self.keep = true;
        // Closing the pipe would stop it: let the watcher go instead.
        if let Some(mut w) = self.watcher.take() {
            let _ = w.kill();
            let _ = w.wait();
        }
        self.watcher_stdin = None;
        self.dir.clone()
    }

    fn command(&self, tool: &str) -> Command {
        let path = self.bin.join(tool);
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        }
    }

    fn run(&self, tool: &str, args: &[&std::ffi::OsStr]) -> anyhow::Result<()> {
        let out = self
            .command(tool)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {tool}"))?;
        if !out.status.success() {
            let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
            bail!(
                "{tool} failed ({}): {}{}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                log.lines().rev().take(20).collect::<Vec<_>>().join("\n")
            );
        }
        Ok(())
    }

    /// A shell that waits for end of input on its stdin, then stops the
    /// cluster and removes its directory: the cleanup runs however this
    /// process ends (tests keep clusters in statics, which are never dropped).
    fn spawn_watcher(&mut self) -> anyhow::Result<()> {
        let stop = format!(
            "cat >/dev/null; {} -D '{}' -m immediate -w stop >/dev/null 2>&1; rm -rf '{}'",
            if self.as_postgres {
                format!(
                    "runuser -u postgres -- '{}'",
                    self.bin.join("pg_ctl").display()
                )
            } else {
                format!("'{}'", self.bin.join("pg_ctl").display())
            },
            self.dir.join("data").display(),
            self.dir.display()
        );
        let mut child = Command::new("sh")
            .args(["-c", &stop])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own process group: a test harness's Ctrl-C reaches us,
            // not the watcher, which then sees our pipe close.
            .process_group(0)
            .spawn()
            .context("starting the cluster's watcher")?;
        self.watcher_stdin = child.stdin.take();
        self.watcher = Some(child);
        Ok(())
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        if let Some(mut stdin) = self.watcher_stdin.take() {
            let _ = stdin.flush();
        }
        if let Some(mut w) = self.watcher.take() {
            let _ = w.wait();
        }
    }
}

fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(l.local_addr()?.port())
}
