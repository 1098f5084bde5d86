// `"commonfabric/cfc"`: the reference's vocabulary for confidentiality and
// integrity labels (atom types, atom constructors, exchange rules). This
// server enforces no labels, so all of it is inert data: an app that builds
// labels loads, and the labels are kept as written.

const ATOM = "https://commonfabric.org/cfc/atom/";
const atomTypes = {};
for (const name of [
  "BoundaryContext", "Builtin", "Caveat", "CaveatAssessment", "CaveatScreened", "Concept",
  "Context", "DisclaimerAttached", "DisclosureAcknowledged", "DisclosureRendered", "Expires",
  "ExternalIngest", "HasRole", "InjectionSafe", "LinkReference", "LlmDerived", "Origin", "Policy",
  "PolicyCertified", "PersonalSpace", "PromptSlotBound", "PromptSlotInfluence", "Resource", "Space",
  "TransformedBy", "User", "UserSurfaceInput",
]) {
  atomTypes[name] = ATOM + name;
}

function deepFreeze(v) {
  if (v !== null && typeof v === "object" && !Object.isFrozen(v)) {
    Object.freeze(v);
    for (const k of Reflect.ownKeys(v)) deepFreeze(v[k]);
  }
  return v;
}

export const CFC_ATOM_TYPE = deepFreeze(atomTypes);
export const CFC_RUNTIME_SUBJECT = "did:web:commonfabric.org#runtime";
export const CFC_COMPILED_BY_ATOM_PREFIX = "cf-compiled-by:";
export const CFC_COMPILED_BY_ATOM = "cf-compiled-by:cf-compiler";

const CONCEPT = "https://commonfabric.org/cfc/concepts/";
export const CFC_CONCEPT_KIND = deepFreeze({
  PromptInfluence: CONCEPT + "prompt-influence",
  PromptInjectionRiskIngressScreened: CONCEPT + "prompt-injection-risk-ingress-screened",
  PromptInjectionRiskUnscreened: CONCEPT + "prompt-injection-risk-unscreened",
  PromptInjectionRiskValueScreened: CONCEPT + "prompt-injection-risk-value-screened",
});

export const CFC_FUSE_ATOM_CLASS = deepFreeze({
  ProjectionMetadataIncomplete: "CommonFabricFuseProjectionMetadataIncomplete",
  SymlinkTarget: "CommonFabricFuseSymlinkTarget",
  TopologyObservation: "FilesystemTopologyObservation",
});

export const CFC_CANONICAL_ALIAS_NAMES = deepFreeze([
  "Cfc", "Confidential", "Integrity", "AddIntegrity", "RepresentsCurrentUser",
  "AuthoredByCurrentUser", "RequiresIntegrity", "MaxConfidentiality", "AnyOf", "PolicyOf",
  "WriteAuthorizedBy", "TrustedActionWriteWithIntegrity", "TrustedActionWrite",
  "TrustedActionUiContract", "ExactCopy", "ProjectionPath", "ProjectionOf", "Projection",
]);

// A pattern variable of an exchange rule.
export function v(name) {
  if (typeof name !== "string" || name.length === 0) {
    throw new TypeError("CFC pattern variable names must be non-empty");
  }
  return deepFreeze({ var: name });
}

// The policy a module-policy reference selects; its `subject` field is not
// enumerable (it is not part of the value).
const thisPolicy = { thisPolicy: true };
Object.defineProperty(thisPolicy, "subject", {
  value: deepFreeze({ thisPolicyField: "subject" }),
  enumerable: false,
});
export const THIS_POLICY = deepFreeze(thisPolicy);

export const cfcPattern = deepFreeze({
  user: (subject) => deepFreeze({ type: atomTypes.User, subject }),
  hasRole: (principal, space, role) => deepFreeze({ type: atomTypes.HasRole, principal, space, role }),
});

export function exchangeRule(input) {
  return deepFreeze(input);
}
export function exchangeRules(rules) {
  return deepFreeze([...rules]);
}

// Fields given as `undefined` are left out, so an atom equals the one
// minted without them.
function defined(fields) {
  const out = {};
  for (const k of Object.keys(fields)) if (fields[k] !== undefined) out[k] = fields[k];
  return out;
}

export const cfcAtom = deepFreeze({
  resource: (className, subject, scope) =>
    defined({ type: atomTypes.Resource, class: className,
      subject: subject === undefined ? CFC_RUNTIME_SUBJECT : subject, scope }),
  caveat: (kind, source, by) => defined({ type: atomTypes.Caveat, kind, source, by }),
  builtin: (name) => ({ type: atomTypes.Builtin, name }),
  injectionSafe: () => ({ type: atomTypes.InjectionSafe }),
  llmDerived: (model) => defined({ type: atomTypes.LlmDerived, model }),
  userSurfaceInput: (user, surface, valueDigest) =>
    ({ type: atomTypes.UserSurfaceInput, user, surface, valueDigest }),
  externalIngest: (channel, audience, receivedAt, valueDigest) =>
    ({ type: atomTypes.ExternalIngest, channel, audience, receivedAt, valueDigest }),
  promptSlotBound: (source, role, kernelName, subject, surface, valueDigest) =>
    ({ type: atomTypes.PromptSlotBound, source, role, kernelName, subject, surface, valueDigest }),
  user: (subject) => ({ type: atomTypes.User, subject }),
  policyRef: (name, subject, hash) => ({ type: atomTypes.Policy, name, subject, hash }),
  contextRef: (name, subject, hash) => ({ type: atomTypes.Context, name, subject, hash }),
  modulePolicyRef: (moduleIdentity, symbol, policyDigest, subject) =>
    ({ type: atomTypes.Policy, policyRefKind: "module", moduleIdentity, symbol, policyDigest, subject }),
  space: (id) => ({ type: atomTypes.Space, id }),
  personalSpace: (owner) => ({ type: atomTypes.PersonalSpace, owner }),
  expires: (timestamp) => ({ type: atomTypes.Expires, timestamp }),
  hasRole: (principal, space, role) => ({ type: atomTypes.HasRole, principal, space, role }),
  boundaryContext: (key, value, ref) => defined({ type: atomTypes.BoundaryContext, key, value, ref }),
  caveatScreened: (fields) => Object.assign(defined(fields || {}), { type: atomTypes.CaveatScreened }),
  disclosureRendered: (fields) =>
    Object.assign(defined(fields || {}), { type: atomTypes.DisclosureRendered }),
  disclosureAcknowledged: (fields) =>
    Object.assign(defined(fields || {}), { type: atomTypes.DisclosureAcknowledged }),
  disclaimerAttached: (fields) =>
    Object.assign(defined(fields || {}), { type: atomTypes.DisclaimerAttached }),
  caveatAssessment: (fields) =>
    Object.assign(defined(fields || {}), { type: atomTypes.CaveatAssessment }),
  concept: (uri) => ({ type: atomTypes.Concept, uri }),
});
