//! ES module resolution and loading for a sandbox.
//!
//! Invariants:
//! - Only four kinds of module exist: the embedder's registered modules
//!   (`(name, source)` pairs), the built-in `"commonfabric"` module, its
//!   subpath modules and the private module behind it
//!   ([`INTERNAL_MODULE`]), whose JS sources the embedder supplies at
//!   construction ([`Builtins`]), and the native
//!   `"spacewake:host"` module that exposes the registered host functions as
//!   its default export. Anything else fails to resolve, and the failure is
//!   recorded host-side so the call reports `SandboxError::Module`.
//! - `"spacewake:host"` resolves only when imported *by* `"commonfabric"`
//!   or the internal module: host functions reach pattern code only through
//!   the authoring API, never as ambient globals or direct imports.
//! - The internal module resolves only for `"commonfabric"`, the
//!   embedder's host modules (`Sandbox::add_host_modules`) and the embedder
//!   itself (an import with no module running); a host module resolves only
//!   for the embedder. What the embedder drives pattern code through is
//!   therefore not reachable from any pattern module's imports.
//! - A registered name maps to one source forever (QuickJS caches modules by
//!   name per context); re-registering a name with different source is
//!   rejected. Embedders should use content-addressed names.
//! - A module may be registered as an *instance* of a template name of the
//!   same length (`Sandbox::add_instance`): the same source instantiated
//!   apart, its bytecode compiled once and renamed on load.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use rquickjs::loader::{Loader, Resolver};
use rquickjs::module::{Declarations, Exports, ModuleDef};
use rquickjs::{Ctx, Error, JsLifetime, Module, Object};

use super::state::State;

/// The specifier of the built-in authoring API module.
pub const COMMONFABRIC: &str = "commonfabric";
/// The specifier of the native host-function module (importable only by `commonfabric`).
pub const HOST_MODULE: &str = "spacewake:host";
/// The specifier of the embedder's private module: the implementation
/// behind `"commonfabric"`, with the entry points the embedder drives
/// pattern code through. Importable only by `"commonfabric"`, by the
/// embedder's host modules and by the embedder itself, so no pattern
/// module can name it.
pub const INTERNAL_MODULE: &str = "spacewake:internal";

/// The built-in modules' sources: the public authoring API and the private
/// module behind it.
#[derive(Debug, PartialEq, Eq)]
pub struct Builtins {
    /// `"commonfabric"`, what patterns import.
    pub api: &'static str,
    /// [`INTERNAL_MODULE`].
    pub internal: &'static str,
    /// The API's subpath modules (`"commonfabric/cfc"`, ...): name and
    /// source. Importable by any module, like `"commonfabric"`; each may
    /// import only `"commonfabric"` and other subpaths.
    pub subpaths: &'static [(&'static str, &'static str)],
}

/// Module sources shared by the resolver, the loader and the `Sandbox`.
pub(crate) struct Registry {
    /// Ordered, so the modules under a prefix are one range.
    pub modules: RefCell<BTreeMap<String, Registered>>,
    pub commonfabric: Rc<str>,
    pub internal: Rc<str>,
    pub subpaths: &'static [(&'static str, &'static str)],
}

impl Registry {
    fn subpath(&self, name: &str) -> Option<&'static str> {
        self.subpaths
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, s)| *s)
    }
}

/// One registered module.
#[derive(Clone)]
pub(crate) struct Registered {
    pub source: Rc<str>,
    /// For an instance of another module: that module's name, which the
    /// cached bytecode carries (same length as this module's name).
    pub template: Option<Rc<str>>,
    /// The embedder's glue (`Sandbox::add_host_modules`): may import the
    /// internal module; imported only by the embedder.
    pub host: bool,
}

pub(crate) struct SandboxResolver {
    pub registry: Rc<Registry>,
    pub state: Rc<State>,
}

/// `base`'s directory joined with a relative `name`, with `.`/`..` folded.
fn join_relative(base: &str, name: &str) -> Option<String> {
    let mut parts: Vec<&str> = base.split('/').collect();
    parts.pop(); // drop the importer's own file name
    for seg in name.split('/') {
        match seg {
            "." | "" => {}
            ".." => {
                parts.pop()?;
            }
            s => parts.push(s),
        }
    }
    Some(parts.join("/"))
}

impl Resolver for SandboxResolver {
    fn resolve<'js>(
        &mut self,
        _ctx: &Ctx<'js>,
        base: &str,
        name: &str,
    ) -> rquickjs::Result<String> {
        let fail = |why: String| {
            let mut slot = self.state.resolve_error.borrow_mut();
            if slot.is_none() {
                *slot = Some((name.to_string(), base.to_string(), why.clone()));
            }
            Err(Error::new_resolving_message(base, name, why))
        };
        if name == COMMONFABRIC || self.registry.subpath(name).is_some() {
            return Ok(name.to_string());
        }
        if name == HOST_MODULE {
            if base == COMMONFABRIC || base == INTERNAL_MODULE {
                return Ok(name.to_string());
            }
            return fail(format!(
                "{HOST_MODULE:?} may only be imported by {COMMONFABRIC:?}"
            ));
        }
        // The embedder's own imports come with an empty base (no module is
        // running); pattern code always runs inside a module of its own.
        let embedder = base.is_empty();
        let host_base = || {
            self.registry
                .modules
                .borrow()
                .get(base)
                .is_some_and(|r| r.host)
        };
        if name == INTERNAL_MODULE {
            if embedder || base == COMMONFABRIC || host_base() {
                return Ok(name.to_string());
            }
            return fail(
                "unknown module; patterns may import only \"commonfabric\" and their own modules"
                    .into(),
            );
        }
        let candidate = if name.starts_with("./") || name.starts_with("../") {
            match join_relative(base, name) {
                Some(c) => c,
                None => return fail("relative import climbs above the module root".into()),
            }
        } else {
            name.to_string()
        };
        let host_module = self
            .registry
            .modules
            .borrow()
            .get(&candidate)
            .map(|r| r.host);
        if host_module == Some(false) || (host_module == Some(true) && embedder) {
            Ok(candidate)
        } else {
            fail(format!(
                "unknown module; patterns may import only {COMMONFABRIC:?} and their own modules"
            ))
        }
    }
}

pub(crate) struct SandboxLoader {
    pub registry: Rc<Registry>,
}

impl Loader for SandboxLoader {
    fn load<'js>(&mut self, ctx: &Ctx<'js>, name: &str) -> rquickjs::Result<Module<'js>> {
        if name == HOST_MODULE {
            return Module::declare_def::<HostModule, _>(ctx.clone(), name);
        }
        if name == COMMONFABRIC {
            let source = self.registry.commonfabric.clone();
            return super::bytecode::declare_builtin(ctx, name, &source);
        }
        if name == INTERNAL_MODULE {
            let source = self.registry.internal.clone();
            return super::bytecode::declare_builtin(ctx, name, &source);
        }
        if let Some(source) = self.registry.subpath(name) {
            return super::bytecode::declare_builtin(ctx, name, source);
        }
        let registered = match self.registry.modules.borrow().get(name) {
            Some(r) => r.clone(),
            None => return Err(Error::new_loading_message(name, "not registered")),
        };
        match &registered.template {
            Some(template) => super::bytecode::declare_as(ctx, template, name, &registered.source),
            None => super::bytecode::declare(ctx, name, &registered.source),
        }
    }
}

/// The object exported by `"spacewake:host"`; host functions are properties
/// of it. Kept in the runtime's userdata, which rquickjs drops before it
/// frees the runtime.
pub(crate) struct HostObject<'js>(pub Object<'js>);

// SAFETY: `HostObject` holds exactly one `'js`-bound value and no other
// lifetime, which is the documented condition for a correct `JsLifetime`.
unsafe impl<'js> JsLifetime<'js> for HostObject<'js> {
    type Changed<'to> = HostObject<'to>;
}

pub(crate) struct HostModule;

impl ModuleDef for HostModule {
    fn declare<'js>(decl: &Declarations<'js>) -> rquickjs::Result<()> {
        decl.declare("default")?;
        Ok(())
    }

    fn evaluate<'js>(ctx: &Ctx<'js>, exports: &Exports<'js>) -> rquickjs::Result<()> {
        let host = ctx
            .userdata::<HostObject>()
            .ok_or_else(|| Error::new_loading_message(HOST_MODULE, "host object missing"))?;
        exports.export("default", host.0.clone())?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::join_relative;

    #[test]
    fn relative_joins() {
        assert_eq!(
            join_relative("p/main.js", "./util.js").as_deref(),
            Some("p/util.js")
        );
        assert_eq!(
            join_relative("p/a/main.js", "../util.js").as_deref(),
            Some("p/util.js")
        );
        assert_eq!(
            join_relative("main.js", "./util.js").as_deref(),
            Some("util.js")
        );
        assert_eq!(join_relative("main.js", "../util.js"), None);
    }
}
