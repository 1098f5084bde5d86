//! The fleet's directory on PostgreSQL: the `spaces` rows (what each space
//! needs from a host, moved inside each commit's own transaction, so never
//! late), grants, and fleet-wide settings in `store_meta` — the same
//! questions the SQLite host file answers, for every host at once.

use super::PgStore;
use crate::store::directory::{Discovered, Projection, SpaceEntry, UpcomingWake};
use crate::store::error::{PgContext, StoreError, StoreResult};
use crate::store::file_store::WindowSpend;
use postgres::Row;

/// A space's row as the directory shows it; whether it may carry a budget
/// policy is read from its policy rows (exact, not a flag).
const ENTRY: &str = "SELECT s.id, s.owner, s.created_at_ms, s.next_wake_ms, s.undelivered, \
     s.quarantined, EXISTS (SELECT 1 FROM space_policy p WHERE p.space = s.id) FROM spaces s";

fn entry_from_row(r: &Row) -> SpaceEntry {
    SpaceEntry {
        id: r.get(0),
        owner: r.get(1),
        created_ms: r.get::<_, i64>(2) as u64,
        next_wake_ms: r.get::<_, Option<i64>>(3).map(|v| v.max(0) as u64),
        undelivered: r.get(4),
        quarantined: r.get(5),
        budget_policy: Some(r.get(6)),
    }
}

impl PgStore {
    fn rows(
        &self,
        context: &str,
        sql: &str,
        p: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> StoreResult<Vec<Row>> {
        let mut c = self.inner.take()?;
        let rows = c.db().query(sql, p).doing(context)?;
        Ok(rows)
    }

    pub fn get(&self, id: &str) -> StoreResult<Option<SpaceEntry>> {
        let rows = self.rows(
            "reading the directory",
            &format!("{ENTRY} WHERE s.id = $1"),
            &[&id],
        )?;
        Ok(rows.first().map(entry_from_row))
    }

    pub fn owned_by(&self, owner: &str) -> StoreResult<u64> {
        let rows = self.rows(
            "counting spaces",
            "SELECT count(*) FROM spaces WHERE owner = $1",
            &[&owner],
        )?;
        Ok(rows[0].get::<_, i64>(0) as u64)
    }

    pub fn list(&self, after: Option<&str>, limit: usize) -> StoreResult<Vec<SpaceEntry>> {
        let rows = self.rows(
            "listing spaces",
            &format!("{ENTRY} WHERE s.id > $1 ORDER BY s.id LIMIT $2"),
            &[&after.unwrap_or(""), &(limit as i64)],
        )?;
        Ok(rows.iter().map(entry_from_row).collect())
    }

    pub fn all(&self) -> StoreResult<Vec<SpaceEntry>> {
        let rows = self.rows("listing spaces", &format!("{ENTRY} ORDER BY s.id"), &[])?;
        Ok(rows.iter().map(entry_from_row).collect())
    }

    pub fn count(&self) -> StoreResult<u64> {
        let rows = self.rows("counting spaces", "SELECT count(*) FROM spaces", &[])?;
        Ok(rows[0].get::<_, i64>(0) as u64)
    }

    /// Every healthy space that needs a host by `now_ms`, fleet-wide:
    /// undelivered events, or a wake due (one range of the `wake_at_ms`
    /// index).
    pub fn discover(&self, now_ms: u64) -> StoreResult<Vec<Discovered>> {
        let rows = self.rows(
            "discovering due spaces",
            "SELECT id, next_wake_ms, undelivered FROM spaces \
             WHERE wake_at_ms IS NOT NULL AND wake_at_ms <= $1 AND quarantined IS NULL \
             ORDER BY wake_at_ms",
            &[&(now_ms as i64)],
        )?;
        Ok(rows
            .iter()
            .map(|r| Discovered {
                id: r.get(0),
                next_wake_ms: r.get::<_, Option<i64>>(1).map(|v| v.max(0) as u64),
                undelivered: r.get(2),
            })
            .collect())
    }

    pub fn earliest_wake(&self) -> StoreResult<Option<u64>> {
        let rows = self.rows(
            "reading the earliest wake",
            "SELECT min(next_wake_ms) FROM spaces \
             WHERE next_wake_ms IS NOT NULL AND quarantined IS NULL",
            &[],
        )?;
        Ok(rows[0].get::<_, Option<i64>>(0).map(|v| v.max(0) as u64))
    }

    /// The next `limit` scheduled wakes of the fleet, in time order.
    pub fn upcoming_wakes(&self, limit: usize) -> StoreResult<Vec<UpcomingWake>> {
        let rows = self.rows(
            "reading upcoming wakes",
            "SELECT s.id, s.next_wake_ms, \
             EXISTS (SELECT 1 FROM space_policy p WHERE p.space = s.id) FROM spaces s \
             WHERE s.next_wake_ms IS NOT NULL AND s.quarantined IS NULL \
             ORDER BY s.next_wake_ms LIMIT $1",
            &[&(limit as i64)],
        )?;
        Ok(rows
            .iter()
            .map(|r| UpcomingWake {
                space: r.get(0),
                at_ms: r.get::<_, i64>(1).max(0) as u64,
                budget_policy: Some(r.get(2)),
            })
            .collect())
    }

    /// Nothing to settle: whether a space has a policy is read from its
    /// rows, never cached in a flag.
    pub fn settle_no_budget_policy(&self, _id: &str) -> StoreResult<()> {
        Ok(())
    }

    pub fn projection(&self, id: &str) -> StoreResult<Option<Projection>> {
        Ok(self.get(id)?.map(|e| Projection {
            next_wake_ms: e.next_wake_ms,
            undelivered: e.undelivered,
        }))
    }

    /// Grants `did` access to a space (`"read"` or `"write"`); `None`
    /// revokes. Bumps the fleet's grants version in the same transaction.
    pub fn set_grant(&self, space: &str, did: &str, access: Option<&str>) -> StoreResult<()> {
        if let Some(a) = access {
            if a != "read" && a != "write" {
                return Err(StoreError::InvalidCommit(format!(
                    "access must be \"read\" or \"write\" (got {a:?})"
                )));
            }
        }
        let mut c = self.inner.take()?;
        let mut tx = c.c().transaction().doing("changing a grant")?;
        match access {
            Some(a) => tx.execute(
                "INSERT INTO grants (space, did, access) VALUES ($1, $2, $3) \
                 ON CONFLICT (space, did) DO UPDATE SET access = excluded.access",
                &[&space, &did, &a],
            ),
            None => tx.execute(
                "DELETE FROM grants WHERE space = $1 AND did = $2",
                &[&space, &did],
            ),
        }
        .doing("changing a grant")?;
        tx.execute(
            "INSERT INTO store_meta (key, value) VALUES ('grants_version', '1') \
             ON CONFLICT (key) DO UPDATE SET value = (store_meta.value::bigint + 1)::text",
            &[],
        )
        .doing("bumping the grants version")?;
        tx.commit().doing("changing a grant")
    }

    pub fn grants_version(&self) -> StoreResult<u64> {
        Ok(self
            .meta("grants_version")?
            .and_then(|v| v.parse().ok())
            .unwrap_or(0))
    }

    /// The access `did` has to `space`: `"owner"`, `"write"`, `"read"` or none.
    pub fn access(&self, space: &str, did: &str) -> StoreResult<Option<String>> {
        let rows = self.rows(
            "reading a grant",
            "SELECT CASE WHEN s.owner = $2 THEN 'owner' ELSE \
               (SELECT g.access FROM grants g WHERE g.space = s.id AND g.did = $2) END \
             FROM spaces s WHERE s.id = $1",
            &[&space, &did],
        )?;
        Ok(rows.first().and_then(|r| r.get(0)))
    }

    /// Records an accepted operator action by its decoded signature, for
    /// every host of the fleet (see the SQLite directory's
    /// `first_use_of_signature`); false when it was recorded already.
    pub fn first_use_of_signature(
        &self,
        signature: &[u8],
        now_ms: u64,
        forget_before_ms: u64,
    ) -> StoreResult<bool> {
        let mut c = self.inner.take()?;
        let mut tx = c.c().transaction().doing("recording an operator action")?;
        tx.execute(
            "DELETE FROM operator_signatures WHERE seen_ms < $1",
            &[&(forget_before_ms as i64)],
        )
        .doing("forgetting old operator actions")?;
        let n = tx
            .execute(
                "INSERT INTO operator_signatures (signature, seen_ms) VALUES ($1, $2) \
                 ON CONFLICT (signature) DO NOTHING",
                &[&signature, &(now_ms as i64)],
            )
            .doing("recording an operator action")?;
        tx.commit().doing("recording an operator action")?;
        Ok(n == 1)
    }

    /// A fleet-wide setting (the jitter secret, the grants version).
    pub fn meta(&self, key: &str) -> StoreResult<Option<String>> {
        let rows = self.rows(
            "reading a setting",
            "SELECT value FROM store_meta WHERE key = $1",
            &[&key],
        )?;
        Ok(rows.first().map(|r| r.get(0)))
    }

    /// The stored value for `key`, storing `init()` first if absent; the
    /// first host to write it wins, so every host of the fleet agrees.
    pub fn meta_or_init(&self, key: &str, init: impl FnOnce() -> String) -> StoreResult<String> {
        let candidate = init();
        self.rows(
            "writing a setting",
            "INSERT INTO store_meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
            &[&key, &candidate],
        )?;
        self.meta(key)?.ok_or_else(|| {
            StoreError::InvalidCommit(format!("setting {key:?} vanished after it was written"))
        })
    }

    /// What a space spent in one ledger window, by bucket.
    pub fn window_spend(&self, id: &str, window_start_ms: u64) -> StoreResult<WindowSpend> {
        let rows = self.rows(
            "reading the ledger",
            "SELECT bucket, cpu_us FROM compute_ledger WHERE space = $1 AND window_start_ms = $2",
            &[&id, &(window_start_ms as i64)],
        )?;
        let mut spend = WindowSpend::default();
        for r in rows {
            let cpu = r.get::<_, i64>(1) as u64;
            match r.get::<_, &str>(0) {
                "scheduled" => spend.scheduled_cpu_us += cpu,
                _ => spend.session_cpu_us += cpu,
            }
        }
        Ok(spend)
    }
}
