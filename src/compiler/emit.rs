//! Pass 2: apply pass 1's text edits and turn the edited TypeScript into plain JavaScript.
//!
//! The edited source is parsed again, types are stripped and JSX is lowered by oxc_transformer
//! (classic runtime: `h(tag, props, ...children)`, fragments `h(h.fragment, null, ...)`), then
//! printed by oxc_codegen.
//!
//! Invariants:
//! - edits are applied back to front, so every edit's byte range refers to the original text;
//! - any error in this pass is mapped back to an original offset through [`EditMap`], so
//!   diagnostics still point into the author's file;
//! - the output is an ES module with no TypeScript syntax and no JSX.

use std::path::Path;

use oxc_allocator::Allocator;
use oxc_codegen::Codegen;
use oxc_parser::Parser;
use oxc_semantic::SemanticBuilder;
use oxc_transformer::{JsxOptions, JsxRuntime, TransformOptions, Transformer, TypeScriptOptions};

use super::analyze::source_type_for;
use super::Edit;

/// The JSX factory name the emitted code calls (imported from commonfabric).
pub const JSX_FACTORY: &str = "h";
/// The fragment marker the emitted code passes as the tag of a fragment.
pub const JSX_FRAGMENT: &str = "h.fragment";

/// Maps offsets in edited text back to the original text.
#[derive(Debug, Default)]
pub(crate) struct EditMap {
    /// (original start, original end, edited start, edited len), in order.
    spans: Vec<(u32, u32, u32, u32)>,
}

impl EditMap {
    /// Original offset for an edited offset; positions inside replacement text map to the start
    /// of the replaced range.
    pub fn to_original(&self, pos: u32) -> u32 {
        let mut delta: i64 = 0;
        for &(os, oe, es, el) in &self.spans {
            if pos < es {
                break;
            }
            if pos < es + el {
                return os;
            }
            delta = i64::from(es + el) - i64::from(oe);
        }
        (i64::from(pos) - delta).max(0) as u32
    }
}

/// Apply non-overlapping edits. Returns the edited text and the offset map, or `Err` when two
/// replacements overlap (an internal error: pass 1 must never plan that).
pub(crate) fn apply_edits(text: &str, edits: &[Edit]) -> Result<(String, EditMap), String> {
    let mut order: Vec<usize> = (0..edits.len()).collect();
    order.sort_by_key(|&i| (edits[i].start, edits[i].end));
    let mut out = String::with_capacity(text.len() + 256);
    let mut map = EditMap::default();
    let mut cursor = 0usize;
    for i in order {
        let e = &edits[i];
        let (s, t) = (e.start as usize, e.end as usize);
        if s < cursor || t > text.len() || s > t {
            return Err(format!("overlapping edits at {s}..{t}"));
        }
        out.push_str(&text[cursor..s]);
        let es = out.len() as u32;
        out.push_str(&e.text);
        map.spans.push((e.start, e.end, es, e.text.len() as u32));
        cursor = t;
    }
    out.push_str(&text[cursor..]);
    Ok((out, map))
}

/// (offset, message) of each oxc diagnostic. A macro because oxc's diagnostic type lives in a
/// crate this module does not depend on directly.
macro_rules! oxc_errors {
    ($diags:expr) => {
        $diags
            .iter()
            .map(|d| {
                (
                    d.labels.first().map_or(0, |l| l.offset()),
                    d.message.to_string(),
                )
            })
            .collect::<Vec<(u32, String)>>()
    };
}

/// Strip types, lower JSX, print JS. `Err` holds (edited-text offset, message) pairs.
pub(crate) fn to_js(path: &str, edited: &str) -> Result<String, Vec<(u32, String)>> {
    let alloc = Allocator::default();
    let parsed = Parser::new(&alloc, edited, source_type_for(path)).parse();
    if parsed.panicked || !parsed.diagnostics.is_empty() {
        return Err(oxc_errors!(parsed.diagnostics));
    }
    let mut program = parsed.program;
    let scoping = SemanticBuilder::new()
        .build(&program)
        .semantic
        .into_scoping();
    let options = TransformOptions {
        typescript: TypeScriptOptions {
            // Keeps `import { h }` alive although no source line mentions `h` after lowering.
            jsx_pragma: JSX_FACTORY.into(),
            jsx_pragma_frag: JSX_FRAGMENT.into(),
            ..TypeScriptOptions::default()
        },
        jsx: JsxOptions {
            runtime: JsxRuntime::Classic,
            pragma: Some(JSX_FACTORY.to_string()),
            pragma_frag: Some(JSX_FRAGMENT.to_string()),
            pure: false,
            display_name_plugin: false,
            ..JsxOptions::enable()
        },
        ..TransformOptions::default()
    };
    let ret = Transformer::new(&alloc, Path::new(path), &options)
        .build_with_scoping(scoping, &mut program);
    if !ret.diagnostics.is_empty() {
        return Err(oxc_errors!(ret.diagnostics));
    }
    Ok(Codegen::new().build(&program).code)
}
