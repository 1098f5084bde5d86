//! The recorded graph of a piece and the pure helpers over its JSON: links,
//! streams, argument defaults. No I/O and no JavaScript here.
//!
//! Wire shapes (also stored on result documents):
//! - a reference: `{"$link": {"doc": "<doc id>", "path": ["seg", ...]}}`
//! - a stream:    `{"$stream": "<stream id>"}`

use crate::store::PathSeg;
use serde::Deserialize;
use serde_json::{Map, Value};

/// A derivation node: `fn(...args)` written to document `id`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct NodeDef {
    pub id: String,
    pub kind: String,
    #[serde(rename = "fn")]
    pub fn_index: u64,
    /// Argument templates; `$link`s are replaced by values before a run.
    pub args: Value,
    pub label: String,
}

/// A handler or action bound to a stream.
#[derive(Debug, Clone, Deserialize)]
pub struct StreamDef {
    pub id: String,
    pub kind: String,
    /// The handler's name in the source (`const sweep = handler(...)`).
    #[serde(default)]
    pub label: Option<String>,
    #[serde(rename = "fn")]
    pub fn_index: u64,
    pub context: Value,
    pub schema: Option<Value>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct CellDef {
    pub id: String,
    pub initial: Value,
    /// An inner pattern's result: rewritten whenever it changes, where a
    /// cell keeps what handlers wrote.
    #[serde(default)]
    pub result: bool,
}

/// What a derivation built while it ran (its frame), besides its value.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Frame {
    #[serde(skip)]
    pub value: Value,
    #[serde(default)]
    pub nodes: Vec<NodeDef>,
    #[serde(default)]
    pub streams: Vec<StreamDef>,
    #[serde(default)]
    pub cells: Vec<CellDef>,
    /// Writes through cells the derivation was given (`{doc, path, value}`).
    #[serde(default)]
    pub writes: Value,
}

impl Frame {
    /// Reads a run's result, `{value, built}`: `built` is what the run
    /// built and wrote (`{nodes, streams, cells, writes}`), or null.
    pub fn from_run(mut out: Value) -> Result<Frame, String> {
        let Some(m) = out.as_object_mut() else {
            return Err("not a run's result".into());
        };
        let value = m.get_mut("value").map(Value::take).unwrap_or_default();
        let built = m.get_mut("built").map(Value::take).unwrap_or_default();
        if built.is_null() {
            return Ok(Frame {
                value,
                ..Frame::default()
            });
        }
        let mut frame = serde_json::from_value::<Frame>(built).map_err(|e| e.to_string())?;
        frame.value = value;
        if frame.writes.as_array().is_some_and(Vec::is_empty) {
            frame.writes = Value::Null;
        }
        Ok(frame)
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty() && self.streams.is_empty() && self.cells.is_empty()
    }
}

/// What `__instantiate` returns.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Recorded {
    pub name: Option<String>,
    pub argument_schema: Option<Value>,
    pub result: Value,
    pub nodes: Vec<NodeDef>,
    pub streams: Vec<StreamDef>,
    pub cells: Vec<CellDef>,
}

/// A reference's target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub doc: String,
    pub path: Vec<PathSeg>,
}

pub fn as_link(v: &Value) -> Option<Link> {
    let l = v.as_object()?.get("$link")?.as_object()?;
    let doc = l.get("doc")?.as_str()?.to_string();
    let path = l
        .get("path")?
        .as_array()?
        .iter()
        .map(|s| match s {
            Value::String(k) => PathSeg::Key(k.clone()),
            Value::Number(n) => PathSeg::Index(n.as_u64().unwrap_or(0) as usize),
            other => PathSeg::Key(other.to_string()),
        })
        .collect();
    Some(Link { doc, path })
}

/// Whether a link asks for a cell (a `Cell`-typed input), not a value.
pub fn link_wants_cell(v: &Value) -> bool {
    v.get("$link")
        .and_then(|l| l.get("asCell"))
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// Whether a link asks for an array with a cell per element (an input
/// typed `Cell<T>[]`).
pub fn link_wants_cell_items(v: &Value) -> bool {
    v.get("$link")
        .and_then(|l| l.get("cellItems"))
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// The fields a link asks to be cells in the object it leads to (a piece's
/// result whose type has `Writable<T>` fields, captured whole).
pub fn link_cell_fields(v: &Value) -> Option<Vec<String>> {
    let fields = v.get("$link")?.get("cellFields")?.as_array()?;
    Some(
        fields
            .iter()
            .filter_map(|f| f.as_str().map(str::to_string))
            .collect(),
    )
}

/// Whether a template holds a `Cell`-typed input anywhere.
pub fn has_cell_link(v: &Value) -> bool {
    match v {
        Value::Array(a) => a.iter().any(has_cell_link),
        Value::Object(m) => match m.get("$link") {
            Some(_) => {
                link_wants_cell(v) || link_wants_cell_items(v) || link_cell_fields(v).is_some()
            }
            None => m.values().any(has_cell_link),
        },
        _ => false,
    }
}

pub fn as_stream(v: &Value) -> Option<&str> {
    v.as_object()?.get("$stream")?.as_str()
}

/// The length of `v` as compact JSON, without building the text.
pub fn json_size(v: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    // Writing to a counter cannot fail.
    let _ = serde_json::to_writer(&mut c, v);
    c.0
}

/// Whether `v` holds a reference or a stream anywhere.
pub fn has_refs(v: &Value) -> bool {
    match v {
        Value::Array(a) => a.iter().any(has_refs),
        Value::Object(m) => {
            m.contains_key("$link") || m.contains_key("$stream") || m.values().any(has_refs)
        }
        _ => false,
    }
}

/// Every document a template refers to (its reads).
pub fn linked_docs(v: &Value, out: &mut Vec<String>) {
    if let Some(l) = as_link(v) {
        out.push(l.doc);
        return;
    }
    match v {
        Value::Array(a) => a.iter().for_each(|x| linked_docs(x, out)),
        Value::Object(m) => m.values().for_each(|x| linked_docs(x, out)),
        _ => {}
    }
}

/// A handler context bound whole (`roll(state)`: one link) whose type names
/// cell or stream fields, as the fields bound one by one (`roll({ value:
/// state.value })`), which is how the reference gives it; `None` otherwise.
pub fn whole_context_fields(context: &Value, schema: Option<&Value>) -> Option<Value> {
    let l = as_link(context)?;
    let props = schema?.get("properties")?.as_object()?;
    let flagged = |f: &Value, flag: &str| f.get(flag).and_then(Value::as_bool) == Some(true);
    if !props
        .values()
        .any(|f| flagged(f, "asCell") || flagged(f, "asStream"))
    {
        return None;
    }
    let fields = props
        .keys()
        .map(|k| {
            let mut path = l.path.clone();
            path.push(PathSeg::Key(k.clone()));
            (
                k.clone(),
                serde_json::json!({"$link": {"doc": l.doc, "path": path}}),
            )
        })
        .collect();
    Some(Value::Object(fields))
}

/// The nodes nothing links to from any of `values` (piece results, node
/// arguments, binding contexts, documents held): their outputs cannot be
/// read, so what they write is all they do. Sorted, for a stable order.
pub fn unreferenced<'a>(
    nodes: impl Iterator<Item = &'a String>,
    values: impl Iterator<Item = &'a Value>,
) -> Vec<String> {
    let mut linked = Vec::new();
    for v in values {
        linked_docs(v, &mut linked);
    }
    let linked: std::collections::HashSet<String> = linked.into_iter().collect();
    let mut out: Vec<String> = nodes.filter(|n| !linked.contains(*n)).cloned().collect();
    out.sort();
    out
}

/// The argument a piece starts with: `given`, plus each schema default for a
/// field `given` lacks, at every level of nested object schemas.
pub fn apply_defaults(schema: Option<&Value>, given: &Value) -> Value {
    let mut out = match given {
        Value::Object(m) => m.clone(),
        Value::Null => Map::new(),
        other => return other.clone(),
    };
    if let Some(props) = schema
        .and_then(|s| s.get("properties"))
        .and_then(|p| p.as_object())
    {
        for (k, p) in props {
            match out.get(k) {
                None => match p.get("default") {
                    Some(d @ Value::Object(_)) => {
                        out.insert(k.clone(), apply_defaults(Some(p), d));
                    }
                    Some(d) => {
                        out.insert(k.clone(), d.clone());
                    }
                    None => {}
                },
                Some(v @ Value::Object(_)) => {
                    let filled = apply_defaults(Some(p), v);
                    out.insert(k.clone(), filled);
                }
                Some(_) => {}
            }
        }
    }
    Value::Object(out)
}

/// Whether field `k` of a context schema is a cell (or a stream).
pub fn field_flag(schema: Option<&Value>, k: &str, flag: &str) -> bool {
    schema
        .and_then(|s| s.get("properties"))
        .and_then(|p| p.get(k))
        .and_then(|f| f.get(flag))
        .and_then(|b| b.as_bool())
        .unwrap_or(false)
}

/// Removes `$`-prefixed keys at every level (scenario comparisons ignore them).
pub fn strip_reserved(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip_reserved(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_reserved).collect()),
        other => other.clone(),
    }
}

/// Where each stream shows in a piece's result, as a dotted path
/// (`increment`, `actions.add`, `items.0.remove`; the shortest where it
/// shows twice): the name an operator knows a handler by when the source
/// gave it none. Reserved (`$`) keys
/// are not walked, so a stream seen only in `[SCHEDULE]` or `[UI]` has no
/// path here.
pub fn stream_paths(result: &Value) -> std::collections::HashMap<String, String> {
    type Seen = std::collections::HashMap<String, (usize, String)>;
    fn walk(v: &Value, at: &mut Vec<String>, out: &mut Seen) {
        if let Some(id) = as_stream(v) {
            let shorter = out.get(id).is_none_or(|(depth, _)| *depth > at.len());
            if !at.is_empty() && shorter {
                out.insert(id.to_string(), (at.len(), at.join(".")));
            }
            return;
        }
        // Deep enough for any result a person reads; bounded for the rest.
        if at.len() >= 8 {
            return;
        }
        let children: Box<dyn Iterator<Item = (String, &Value)>> = match v {
            Value::Object(m) => Box::new(
                m.iter()
                    .filter(|(k, _)| !k.starts_with('$'))
                    .map(|(k, v)| (k.clone(), v)),
            ),
            Value::Array(a) => Box::new(a.iter().enumerate().map(|(i, v)| (i.to_string(), v))),
            _ => return,
        };
        for (k, child) in children {
            at.push(k);
            walk(child, at, out);
            at.pop();
        }
    }
    let mut seen = Seen::new();
    walk(result, &mut Vec::new(), &mut seen);
    seen.into_iter().map(|(id, (_, path))| (id, path)).collect()
}

/// `length` as a path segment of an array or a string, as JavaScript reads
/// it (strings count UTF-16 units); `None` for anything else.
pub fn length_of(v: &Value, seg: &PathSeg) -> Option<Value> {
    if !matches!(seg, PathSeg::Key(k) if k == "length") {
        return None;
    }
    match v {
        Value::Array(a) => Some(Value::from(a.len())),
        Value::String(s) => Some(Value::from(s.encode_utf16().count())),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_fill_only_missing_top_level_fields() {
        let schema = json!({"properties": {"a": {"default": 1}, "b": {"default": [1]}, "c": {}, "n": {"default": null}}});
        let out = apply_defaults(Some(&schema), &json!({"a": 5}));
        assert_eq!(out, json!({"a": 5, "b": [1], "n": null}));
        assert_eq!(apply_defaults(None, &Value::Null), json!({}));
        let nested = json!({"properties": {"o": {"properties": {"x": {"default": 1}, "y": {}}}}});
        assert_eq!(
            apply_defaults(Some(&nested), &json!({"o": {"y": 2}})),
            json!({"o": {"x": 1, "y": 2}})
        );
    }

    #[test]
    fn links_are_found_anywhere_in_a_template() {
        let t = json!([{"x": {"$link": {"doc": "d1", "path": ["a", 0]}}}, {"$link": {"doc": "d2", "path": []}}]);
        let mut docs = Vec::new();
        linked_docs(&t, &mut docs);
        assert_eq!(docs, ["d1", "d2"]);
        let l = as_link(&t[0]["x"]).unwrap();
        assert_eq!(l.path, vec![PathSeg::Key("a".into()), PathSeg::Index(0)]);
    }

    #[test]
    fn a_stream_is_named_by_where_it_shows_in_the_result() {
        let r = json!({
            "$SCHEDULE": [{"callback": {"$stream": "p/s0"}}],
            "$UI": {"onClick": {"$stream": "p/s3"}},
            "increment": {"$stream": "p/s1"},
            "actions": {"add": {"$stream": "p/s2"}, "again": {"$stream": "p/s1"}},
            "items": [{"remove": {"$stream": "p/s4"}}],
        });
        let paths = stream_paths(&r);
        assert_eq!(paths.get("p/s1").map(String::as_str), Some("increment"));
        assert_eq!(paths.get("p/s2").map(String::as_str), Some("actions.add"));
        assert_eq!(
            paths.get("p/s4").map(String::as_str),
            Some("items.0.remove")
        );
        // Only under reserved keys: no name from the result.
        assert!(!paths.contains_key("p/s0") && !paths.contains_key("p/s3"));
        assert!(stream_paths(&json!({"$stream": "p/s9"})).is_empty());
    }

    #[test]
    fn reserved_keys_are_stripped_at_every_level() {
        let v = json!({"$UI": 1, "a": {"$NAME": 2, "b": [{"$x": 1, "c": 3}]}});
        assert_eq!(strip_reserved(&v), json!({"a": {"b": [{"c": 3}]}}));
    }
}

/// The deployed piece `piece` descends from in the space's piece list
/// (`{id: {parent?, ...}}`): itself when it has no parent. A missing or
/// looping parent chain stops where it breaks.
pub fn deployed_ancestor(listed: &serde_json::Map<String, Value>, piece: &str) -> String {
    let mut at = piece.to_string();
    for _ in 0..listed.len() {
        match listed.get(&at).and_then(|i| i["parent"].as_str()) {
            Some(parent) if listed.contains_key(parent) => at = parent.to_string(),
            _ => break,
        }
    }
    at
}

#[cfg(test)]
mod ancestor_tests {
    use super::{deployed_ancestor, unreferenced, whole_context_fields};
    use serde_json::json;

    #[test]
    fn a_made_piece_belongs_to_its_deployed_ancestor() {
        let listed = json!({
            "a": {}, "a-1": {"parent": "a"}, "a-1-1": {"parent": "a-1"},
            "b": {}, "orphan": {"parent": "gone"},
            "x": {"parent": "y"}, "y": {"parent": "x"}
        });
        let m = listed.as_object().unwrap();
        assert_eq!(deployed_ancestor(m, "a-1-1"), "a");
        assert_eq!(deployed_ancestor(m, "a"), "a");
        assert_eq!(deployed_ancestor(m, "b"), "b");
        assert_eq!(deployed_ancestor(m, "orphan"), "orphan");
        let looped = deployed_ancestor(m, "x");
        assert!(looped == "x" || looped == "y", "a loop ends");
    }

    #[test]
    fn a_node_nothing_links_to_is_unreferenced() {
        let nodes = ["p/n0".to_string(), "p/n1".to_string(), "p/n2".to_string()];
        let result = json!({"total": {"$link": {"doc": "p/n1", "path": []}}});
        let args = json!([{"$link": {"doc": "p/n0", "path": ["x"]}}]);
        assert_eq!(
            unreferenced(nodes.iter(), [&result, &args].into_iter()),
            vec!["p/n2".to_string()]
        );
    }

    #[test]
    fn a_context_bound_whole_is_given_field_by_field_when_its_type_names_cells() {
        let ctx = json!({"$link": {"doc": "p/argument", "path": ["inner"]}});
        let schema =
            json!({"properties": {"value": {"asCell": true}, "label": {"type": "string"}}});
        assert_eq!(
            whole_context_fields(&ctx, Some(&schema)),
            Some(json!({
                "value": {"$link": {"doc": "p/argument", "path": ["inner", "value"]}},
                "label": {"$link": {"doc": "p/argument", "path": ["inner", "label"]}},
            }))
        );
        let plain = json!({"properties": {"label": {"type": "string"}}});
        assert_eq!(
            whole_context_fields(&ctx, Some(&plain)),
            None,
            "no cells: a value"
        );
        assert_eq!(
            whole_context_fields(&json!({"a": 1}), Some(&schema)),
            None,
            "fields already"
        );
    }
}
