//! Plain-text tables for the command line: columns padded to their widest
//! cell (so long dids and piece ids never push a column out of line),
//! numeric columns aligned to the right, two spaces between columns.

/// Renders rows under a header; `right` lists the (numeric) columns
/// aligned to the right. Every line ends without trailing spaces.
pub fn render<const N: usize>(header: &[&str; N], right: &[usize], rows: &[[String; N]]) -> String {
    let mut widths = header.map(|h| h.chars().count());
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: [&str; N]| {
        let mut text = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            let pad = w - cell.chars().count();
            let last = i + 1 == N;
            if right.contains(&i) {
                text.push_str(&" ".repeat(pad));
                text.push_str(cell);
            } else {
                text.push_str(cell);
                if !last {
                    text.push_str(&" ".repeat(pad));
                }
            }
            if !last {
                text.push_str("  ");
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(*header);
    for row in rows {
        line(std::array::from_fn(|i| row[i].as_str()));
    }
    out
}

/// Prints `value` as pretty JSON: what `--json` prints in place of a
/// table (the operator API's shape, so scripts read either).
pub fn print_json(value: &impl serde::Serialize) -> anyhow::Result<std::process::ExitCode> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(std::process::ExitCode::SUCCESS)
}

/// [`render`], printed to standard output.
pub fn print<const N: usize>(header: &[&str; N], right: &[usize], rows: &[[String; N]]) {
    print!("{}", render(header, right, rows));
}

#[cfg(test)]
mod tests {
    #[test]
    fn columns_align_whatever_the_cell_widths() {
        let did = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK".to_string();
        let text = super::render(
            &["SPACE", "OWNER", "N"],
            &[2],
            &[
                ["a".into(), did.clone(), "1".into()],
                ["longer-space".into(), "x".into(), "1,000".into()],
            ],
        );
        let lines: Vec<&str> = text.lines().collect();
        let owner_col = lines[0].find("OWNER").unwrap();
        assert_eq!(lines[1].find(&did), Some(owner_col));
        assert_eq!(lines[2].find('x'), Some(owner_col));
        // The right-aligned column ends at the same place on every line.
        assert_eq!(lines[1].len(), lines[2].len());
        assert_eq!(lines[0].len(), lines[2].len());
    }
}
