//! `spacewake check FILE...`: compile each pattern and print every
//! diagnostic (`file:line:col: error[CODE]: sentence`, the source line and a
//! caret). Exit status 0 when all files are valid, 1 otherwise.

use crate::compiler::{compile, render, FsSource};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Compiles one entry file from disk, resolving its relative imports next to it.
pub fn compile_file(
    file: &Path,
) -> Result<crate::compiler::CompiledProgram, Vec<crate::compiler::Diagnostic>> {
    let dir = file.parent().map(Path::to_path_buf).unwrap_or_default();
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    compile(&name, &FsSource::new(dir))
}

pub fn run(files: &[PathBuf]) -> ExitCode {
    let mut problems = 0usize;
    for file in files {
        match compile_file(file) {
            Ok(_) => {}
            Err(diags) => {
                problems += diags.len();
                // Diagnostics name files relative to the entry's directory;
                // print them relative to where the user pointed us.
                let dir = file.parent().unwrap_or(Path::new(""));
                let fixed: Vec<_> = diags
                    .into_iter()
                    .map(|mut d| {
                        let rel = d.file.trim_start_matches("./");
                        d.file = dir.join(rel).display().to_string();
                        d
                    })
                    .collect();
                print!("{}", render(&fixed));
            }
        }
    }
    if problems == 0 {
        println!("{} file(s) checked, no problems", files.len());
        ExitCode::SUCCESS
    } else {
        println!("{problems} problem(s) in {} file(s) checked", files.len());
        ExitCode::FAILURE
    }
}
