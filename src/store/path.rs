//! Document paths and the pure patch operation.
//!
//! A path is a list of segments: object keys or array indices. Applying a
//! patch never partially succeeds: the document is cloned, patched, and only
//! returned when every segment resolved.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PathSeg {
    Index(usize),
    Key(String),
}

impl fmt::Display for PathSeg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathSeg::Index(i) => write!(f, "{i}"),
            PathSeg::Key(k) => write!(f, "{k}"),
        }
    }
}

/// Renders a path the way error messages show it: `/items/0/title`.
pub fn display_path(path: &[PathSeg]) -> String {
    if path.is_empty() {
        return "/".to_string();
    }
    path.iter().map(|s| format!("/{s}")).collect()
}

/// Parses a path from JSON: an array whose elements are strings (keys) or
/// non-negative integers (indices).
pub fn parse_path(v: &Value) -> Result<Vec<PathSeg>, String> {
    let items = v
        .as_array()
        .ok_or_else(|| format!("a path must be an array of keys and indices, got {v}"))?;
    items
        .iter()
        .map(|seg| match seg {
            Value::String(s) => Ok(PathSeg::Key(s.clone())),
            Value::Number(n) => n
                .as_u64()
                .map(|i| PathSeg::Index(i as usize))
                .ok_or_else(|| format!("path index {n} is not a non-negative integer")),
            other => Err(format!(
                "path segment {other} is neither a key nor an index"
            )),
        })
        .collect()
}

/// Parses a dot-separated path (`items.0.title`); numeric segments index
/// arrays. Used by scenarios and the CLI.
pub fn parse_dotted(s: &str) -> Vec<PathSeg> {
    if s.is_empty() {
        return Vec::new();
    }
    s.split('.')
        .map(|p| match p.parse::<usize>() {
            Ok(i) if !p.starts_with('+') => PathSeg::Index(i),
            _ => PathSeg::Key(p.to_string()),
        })
        .collect()
}

/// Reads the value at `path`, or `None` if any segment does not resolve.
/// A `Key` segment that looks numeric also indexes arrays, and an `Index`
/// segment also addresses an object key, so dotted paths work on both.
pub fn get_at<'a>(doc: &'a Value, path: &[PathSeg]) -> Option<&'a Value> {
    let mut cur = doc;
    for seg in path {
        cur = match (cur, seg) {
            (Value::Object(m), PathSeg::Key(k)) => m.get(k)?,
            (Value::Object(m), PathSeg::Index(i)) => m.get(&i.to_string())?,
            (Value::Array(a), PathSeg::Index(i)) => a.get(*i)?,
            (Value::Array(a), PathSeg::Key(k)) => a.get(k.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(cur)
}

/// Returns `doc` with `value` written at `path`.
///
/// Rules: a missing object key is created (missing intermediate objects too);
/// an array index may replace an element or append at `len`; anything else
/// (indexing past the end, descending into a number, string, bool or null
/// that exists) is an error naming the offending segment.
pub fn set_at(doc: Option<&Value>, path: &[PathSeg], value: Value) -> Result<Value, String> {
    if path.is_empty() {
        return Ok(value);
    }
    set_at_owned(doc.cloned().unwrap_or(Value::Null), path, value)
}

/// [`set_at`] in place: `doc` is changed only when the write can apply
/// (checked first, along the path), so a refused write leaves it whole.
/// What a write costs is then the length of its path, not the size of the
/// document.
pub fn set_at_mut(doc: &mut Value, path: &[PathSeg], value: Value) -> Result<(), String> {
    let mut cur = &*doc;
    for (depth, seg) in path.iter().enumerate() {
        let next = match (cur, seg, seg_index(seg)) {
            (Value::Null, _, _) if depth == 0 => None,
            (Value::Object(m), seg, _) => m.get(&seg.to_string()),
            (Value::Array(a), _, Some(i)) if i <= a.len() => a.get(i),
            (Value::Array(a), _, Some(i)) => {
                return Err(format!(
                    "index {i} is past the end of the array at {} (length {})",
                    display_path(&path[..depth]),
                    a.len()
                ))
            }
            (Value::Array(_), PathSeg::Key(k), None) => {
                return Err(format!(
                    "key {k:?} cannot address the array at {}",
                    display_path(&path[..depth])
                ))
            }
            (other, seg, _) => {
                return Err(format!(
                    "segment {seg:?} descends into {} at {}",
                    kind_of(other),
                    display_path(&path[..depth])
                ))
            }
        };
        // What is missing from here on is created as objects.
        match next {
            Some(n) => cur = n,
            None => break,
        }
    }
    let root = std::mem::take(doc);
    *doc = set_at_owned(root, path, value).expect("checked along the path");
    Ok(())
}

/// [`set_at`] on an owned document, without cloning it.
pub fn set_at_owned(mut root: Value, path: &[PathSeg], value: Value) -> Result<Value, String> {
    if path.is_empty() {
        return Ok(value);
    }
    if root.is_null() {
        root = Value::Object(Default::default());
    }
    let mut cur = &mut root;
    for (depth, seg) in path.iter().enumerate() {
        let last = depth + 1 == path.len();
        let here = display_path(&path[..depth]);
        let idx = seg_index(seg);
        cur = match (cur, seg, idx) {
            (Value::Object(m), seg, _) => {
                let key = seg.to_string();
                if last {
                    m.insert(key, value);
                    return Ok(root);
                }
                m.entry(key)
                    .or_insert_with(|| Value::Object(Default::default()))
            }
            (Value::Array(a), _, Some(i)) => {
                if i > a.len() {
                    return Err(format!(
                        "index {i} is past the end of the array at {here} (length {})",
                        a.len()
                    ));
                }
                if last {
                    if i == a.len() {
                        a.push(value);
                    } else {
                        a[i] = value;
                    }
                    return Ok(root);
                }
                if i == a.len() {
                    a.push(Value::Object(Default::default()));
                }
                &mut a[i]
            }
            (Value::Array(_), PathSeg::Key(k), None) => {
                return Err(format!("key {k:?} cannot address the array at {here}"))
            }
            (other, seg, _) => {
                return Err(format!(
                    "segment {seg:?} descends into {} at {here}",
                    kind_of(other)
                ))
            }
        };
    }
    unreachable!("the loop returns at the last segment")
}

/// A segment as an array index: an `Index`, or a `Key` spelled as a
/// non-negative integer (JavaScript hands array indices over as strings).
fn seg_index(seg: &PathSeg) -> Option<usize> {
    match seg {
        PathSeg::Index(i) => Some(*i),
        PathSeg::Key(k) if !k.starts_with('+') => k.parse().ok(),
        PathSeg::Key(_) => None,
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn p(v: Value) -> Vec<PathSeg> {
        parse_path(&v).unwrap()
    }

    #[test]
    fn set_creates_missing_keys_and_appends_at_len() {
        let doc = json!({"a": {"list": [1, 2]}});
        let out = set_at(Some(&doc), &p(json!(["a", "list", 2])), json!(3)).unwrap();
        assert_eq!(out, json!({"a": {"list": [1, 2, 3]}}));
        let out = set_at(Some(&doc), &p(json!(["a", "list", "0"])), json!(9)).unwrap();
        assert_eq!(out["a"]["list"], json!([9, 2]), "numeric keys index arrays");
        let out = set_at(Some(&doc), &p(json!(["b", "c"])), json!(true)).unwrap();
        assert_eq!(out["b"], json!({"c": true}));
    }

    #[test]
    fn set_on_missing_doc_starts_from_an_object() {
        let out = set_at(None, &p(json!(["x"])), json!(1)).unwrap();
        assert_eq!(out, json!({"x": 1}));
        assert_eq!(set_at(None, &[], json!(5)).unwrap(), json!(5));
    }

    #[test]
    fn malformed_paths_are_rejected_with_the_segment_named() {
        let doc = json!({"n": 5, "list": [1]});
        let e = set_at(Some(&doc), &p(json!(["n", "x"])), json!(1)).unwrap_err();
        assert!(e.contains("descends into a number at /n"), "{e}");
        let e = set_at(Some(&doc), &p(json!(["list", 5])), json!(1)).unwrap_err();
        assert!(e.contains("past the end"), "{e}");
        let e = set_at(Some(&doc), &p(json!(["list", "k"])), json!(1)).unwrap_err();
        assert!(e.contains("cannot address the array"), "{e}");
        assert!(parse_path(&json!(["a", -1])).is_err());
        assert!(parse_path(&json!(["a", 1.5])).is_err());
        assert!(parse_path(&json!("a.b")).is_err());
        assert!(parse_path(&json!([null])).is_err());
    }

    #[test]
    fn dotted_paths_index_arrays_and_objects() {
        let doc = json!({"items": [{"title": "a"}], "m": {"0": "zero"}});
        assert_eq!(
            get_at(&doc, &parse_dotted("items.0.title")),
            Some(&json!("a"))
        );
        assert_eq!(get_at(&doc, &parse_dotted("m.0")), Some(&json!("zero")));
        assert_eq!(get_at(&doc, &parse_dotted("items.1")), None);
        assert_eq!(get_at(&doc, &parse_dotted("")), Some(&doc));
    }
}
