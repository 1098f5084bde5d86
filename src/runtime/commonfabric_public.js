// What patterns see when they import "commonfabric": the authoring API,
// re-exported from its implementation (`commonfabric.js`, the sandbox's
// private module) without the entry points the host drives pattern code
// through. `__captures`, `__asCell` and `__inlineAction` are helpers the pattern compiler's
// output calls; they build values and reach nothing.
export {
  NAME, UI, SCHEDULE, TYPE, TILE_UI, CHIP_UI, FS, TESTS, SELF, ID, ID_FIELD,
  __asCell, __captures, __assertWith, __named, __part, __inlineAction, lift, ifElse, when, unless, derive, computed, str, cell, handler, action,
  pattern, recipe, h, toSchema, schema, Cell, Writable, equals,
  wish, navigateTo, generateText, generateObject, llm, llmDialog, fetchData, fetchJson,
  fetchJsonUnchecked, fetchText, fetchBinary, fetchProgram, streamData, compileAndRun, resultOf, Default, OpaqueRef, VNode,
  OpaqueCell, Stream, ComparableCell, ReadonlyCell, WriteonlyCell, __cfHelpers,
  patternTool, cellFromUrl, dataFile, cfLink, table, cfSqlite, sqliteDatabase, sqliteQuery,
  inspectConfLabel, uiVariant, UiAction, UiPromptSlot, UiDisclosure, multiUserTest, createNodeFactory,
  byRef, getEntityId, entityRefToString, getPatternEnvironment, valueEqual, toCompactDebugString,
  toIndentedDebugString, __cf_data, AuthSchema, WebhookConfigSchema, FabricSpecialObject,
  FabricInstance, FabricPrimitive, FabricEpochNsec, FabricEpochDay, FabricHash, FabricLink,
  FabricBytes, FabricRegExp, FabricKeyPair, FabricError, assert, FABRIC_SPECIAL_OBJECT_BRAND,
  MERGEABLE_OP_METHODS, FABRIC_PRIMITIVE_SCHEMA_TYPES, isFabricPrimitiveSchemaType,
  CFC_CANONICAL_ALIAS_NAMES,
  default,
} from "spacewake:internal";
