// `URL` and `URLSearchParams` for pattern code: the web's URL parser, for
// what patterns build URLs from (absolute http(s) and ws(s) URLs, relative
// references resolved against a base, query strings). Pure string work; it
// reaches nothing. Not the whole WHATWG algorithm: hosts are lowercased but
// not IDNA-mapped, and IPv4 shorthands are kept as written.
function installUrl(g, defineProperty) {
  "use strict";
  const TypeError = g.TypeError;
  const SPECIAL = { "http:": "80", "https:": "443", "ws:": "80", "wss:": "443", "ftp:": "21", "file:": "" };
  const encodeComponent = g.encodeURIComponent;
  const decodeComponent = g.decodeURIComponent;

  // Percent-encodes each character of `s` that is in `set`, a control or
  // space, or outside ASCII (as UTF-8); an existing `%XX` stays.
  const encodeSet = (s, set) => {
    let out = "";
    for (const ch of s) {
      const c = ch.codePointAt(0);
      if (c <= 0x20 || c >= 0x7f || set.includes(ch)) {
        try { out += encodeComponent(ch); } catch (e) { out += "%EF%BF%BD"; }
      } else {
        out += ch;
      }
    }
    return out;
  };
  const PATH_SET = "\"#<>?`{}";
  const QUERY_SET = "\"#<>";
  const SPECIAL_QUERY_SET = "\"#<>'";
  const FRAGMENT_SET = "\"<>`";
  const USERINFO_SET = "\"#<>?`{}/:;=@[\\]^|";

  const invalid = (input) => new TypeError("Invalid URL: " + String(input));

  // Folds `.` and `..` segments of a path that starts with "/".
  const removeDots = (path) => {
    const segs = path.split("/");
    const out = [];
    for (let i = 1; i < segs.length; i++) {
      const seg = segs[i];
      const last = i === segs.length - 1;
      if (seg === "." || seg.toLowerCase() === "%2e") {
        if (last) out.push("");
      } else if (seg === ".." || /^(\.|%2e)(\.|%2e)$/i.test(seg)) {
        if (out.length > 0) out.pop();
        if (last) out.push("");
      } else {
        out.push(seg);
      }
    }
    return "/" + out.join("/");
  };

  // Splits off `?query` and `#fragment` from the rest of a reference.
  const splitTail = (s) => {
    let fragment = null, query = null;
    const h = s.indexOf("#");
    if (h >= 0) { fragment = s.slice(h + 1); s = s.slice(0, h); }
    const q = s.indexOf("?");
    if (q >= 0) { query = s.slice(q + 1); s = s.slice(0, q); }
    return [s, query, fragment];
  };

  const parseAuthority = (rec, auth, input) => {
    const at = auth.lastIndexOf("@");
    if (at >= 0) {
      const info = auth.slice(0, at);
      auth = auth.slice(at + 1);
      const colon = info.indexOf(":");
      rec.username = encodeSet(colon >= 0 ? info.slice(0, colon) : info, USERINFO_SET);
      rec.password = colon >= 0 ? encodeSet(info.slice(colon + 1), USERINFO_SET) : "";
    }
    let host = auth, port = "";
    const m = /^(\[[^\]]*\]|[^:]*)(?::(.*))?$/.exec(auth);
    if (m) { host = m[1]; port = m[2] === undefined ? "" : m[2]; }
    if (port !== "") {
      if (!/^[0-9]+$/.test(port) || Number(port) > 65535) throw invalid(input);
      port = String(Number(port));
      if (SPECIAL[rec.protocol] === port) port = "";
    }
    if (/[\s<>^|%]/.test(host) && !/^\[/.test(host)) {
      try { host = decodeComponent(host); } catch (e) { throw invalid(input); }
      if (/[\s<>^|%\/\\?#@]/.test(host)) throw invalid(input);
    }
    rec.hostname = host.toLowerCase();
    rec.port = port;
    if (rec.protocol in SPECIAL && rec.protocol !== "file:" && rec.hostname === "") throw invalid(input);
  };

  const setPath = (rec, path) => {
    if (rec.protocol in SPECIAL) path = path.replace(/\\/g, "/");
    rec.pathname = encodeSet(rec.opaque ? path : removeDots(path.startsWith("/") ? path : "/" + path),
      rec.opaque ? "" : PATH_SET);
  };
  const setQuery = (rec, query) => {
    rec.search = query === null || query === "" ? "" :
      "?" + encodeSet(query, rec.protocol in SPECIAL ? SPECIAL_QUERY_SET : QUERY_SET);
  };
  const setFragment = (rec, fragment) => {
    rec.hash = fragment === null || fragment === "" ? "" : "#" + encodeSet(fragment, FRAGMENT_SET);
  };

  const parseAbsolute = (input, scheme, rest) => {
    const rec = { protocol: scheme.toLowerCase() + ":", username: "", password: "", hostname: "",
      port: "", pathname: "", search: "", hash: "", opaque: false, hasHost: false };
    const special = rec.protocol in SPECIAL;
    const [body, query, fragment] = splitTail(rest);
    let path = body;
    let stripped = null;
    if (special && rec.protocol !== "file:") stripped = body.replace(/^[\/\\]*/, "");
    else if (special ? /^[\/\\]{2}/.test(body) : body.startsWith("//")) stripped = body.slice(2);
    if (stripped !== null) {
      const end = stripped.search(special ? /[\/\\]/ : /\//);
      const auth = end < 0 ? stripped : stripped.slice(0, end);
      path = end < 0 ? "" : stripped.slice(end);
      rec.hasHost = true;
      parseAuthority(rec, auth, input);
    } else if (!special && !body.startsWith("/")) {
      rec.opaque = true;
    }
    setPath(rec, path === "" && !rec.opaque && (special || rec.hasHost) ? "/" : path);
    if (!special && !rec.hasHost && !rec.opaque && path === "") rec.pathname = "";
    setQuery(rec, query);
    setFragment(rec, fragment);
    return rec;
  };

  const parse = (input, base) => {
    const s = String(input).replace(/^[\u0000-\u0020]+|[\u0000-\u0020]+$/g, "").replace(/[\t\n\r]/g, "");
    const m = /^([a-zA-Z][a-zA-Z0-9+.\-]*):(.*)$/s.exec(s);
    if (m && !(base && base.protocol === m[1].toLowerCase() + ":" && base.protocol in SPECIAL &&
      !/^[\/\\]/.test(m[2]))) {
      return parseAbsolute(input, m[1], m[2]);
    }
    if (!base) throw invalid(input);
    const rel = m ? m[2] : s;
    if (base.opaque) {
      if (!rel.startsWith("#")) throw invalid(input);
      const rec = Object.assign({}, base);
      setFragment(rec, rel.slice(1));
      return rec;
    }
    const special = base.protocol in SPECIAL;
    if (/^\/\//.test(rel) || (special && /^[\/\\]{2}/.test(rel))) {
      return parseAbsolute(input, base.protocol.slice(0, -1), rel);
    }
    const rec = Object.assign({}, base);
    const [body, query, fragment] = splitTail(rel);
    if (body === "") {
      if (query !== null) setQuery(rec, query);
      setFragment(rec, fragment);
      return rec;
    }
    if (/^[\/]/.test(body) || (special && /^\\/.test(body))) {
      setPath(rec, body);
    } else {
      const dir = base.pathname.slice(0, base.pathname.lastIndexOf("/") + 1);
      setPath(rec, (dir === "" ? "/" : dir) + body);
    }
    setQuery(rec, query);
    setFragment(rec, fragment);
    return rec;
  };

  const hostOf = (rec) => rec.hostname + (rec.port === "" ? "" : ":" + rec.port);
  const hrefOf = (rec) => {
    let out = rec.protocol;
    if (rec.hasHost) {
      out += "//";
      if (rec.username !== "" || rec.password !== "") {
        out += rec.username + (rec.password === "" ? "" : ":" + rec.password) + "@";
      }
      out += hostOf(rec);
    }
    return out + rec.pathname + rec.search + rec.hash;
  };

  // form-urlencoded, as URLSearchParams writes it.
  const formEncode = (s) => encodeComponent(s).replace(/%20/g, "+").replace(/[!'()~]/g,
    (c) => "%" + c.charCodeAt(0).toString(16).toUpperCase());
  const formDecode = (s) => {
    const t = s.replace(/\+/g, " ");
    try { return decodeComponent(t); } catch (e) { return t; }
  };
  const parseQuery = (q) => {
    const out = [];
    for (const part of q.split("&")) {
      if (part === "") continue;
      const eq = part.indexOf("=");
      out.push(eq < 0 ? [formDecode(part), ""] : [formDecode(part.slice(0, eq)), formDecode(part.slice(eq + 1))]);
    }
    return out;
  };

  class URLSearchParams {
    #list;
    #owner;
    constructor(init) {
      this.#owner = null;
      if (init === undefined || init === null) this.#list = [];
      else if (typeof init === "string") this.#list = parseQuery(init.startsWith("?") ? init.slice(1) : init);
      else if (init instanceof URLSearchParams) this.#list = init.#list.map((p) => [p[0], p[1]]);
      else if (typeof init === "object" && typeof init[Symbol.iterator] === "function") {
        this.#list = [];
        for (const pair of init) {
          const p = Array.from(pair);
          if (p.length !== 2) throw new TypeError("URLSearchParams: each pair needs a name and a value");
          this.#list.push([String(p[0]), String(p[1])]);
        }
      } else if (typeof init === "object") {
        this.#list = Object.keys(init).map((k) => [k, String(init[k])]);
      } else {
        this.#list = parseQuery(String(init));
      }
    }
    static attach(params, owner) { params.#owner = owner; }
    static replace(params, query) { params.#list = parseQuery(query); }
    #changed() { if (this.#owner !== null) this.#owner(this.toString()); }
    get size() { return this.#list.length; }
    append(name, value) { this.#list.push([String(name), String(value)]); this.#changed(); }
    delete(name, value) {
      const n = String(name);
      this.#list = this.#list.filter((p) => !(p[0] === n && (value === undefined || p[1] === String(value))));
      this.#changed();
    }
    get(name) {
      const n = String(name);
      const p = this.#list.find((x) => x[0] === n);
      return p === undefined ? null : p[1];
    }
    getAll(name) { const n = String(name); return this.#list.filter((p) => p[0] === n).map((p) => p[1]); }
    has(name, value) {
      const n = String(name);
      return this.#list.some((p) => p[0] === n && (value === undefined || p[1] === String(value)));
    }
    set(name, value) {
      const n = String(name), v = String(value);
      const i = this.#list.findIndex((p) => p[0] === n);
      if (i < 0) this.#list.push([n, v]);
      else {
        this.#list[i] = [n, v];
        this.#list = this.#list.filter((p, j) => j <= i || p[0] !== n);
      }
      this.#changed();
    }
    sort() {
      this.#list = this.#list.map((p, i) => [p, i]).sort((a, b) =>
        a[0][0] < b[0][0] ? -1 : a[0][0] > b[0][0] ? 1 : a[1] - b[1]).map((x) => x[0]);
      this.#changed();
    }
    forEach(fn, thisArg) { for (const [k, v] of this.#list.slice()) fn.call(thisArg, v, k, this); }
    keys() { return this.#list.map((p) => p[0])[Symbol.iterator](); }
    values() { return this.#list.map((p) => p[1])[Symbol.iterator](); }
    entries() { return this.#list.map((p) => [p[0], p[1]])[Symbol.iterator](); }
    [Symbol.iterator]() { return this.entries(); }
    toString() { return this.#list.map((p) => formEncode(p[0]) + "=" + formEncode(p[1])).join("&"); }
  }
  const attachParams = URLSearchParams.attach;
  const replaceParams = URLSearchParams.replace;
  delete URLSearchParams.attach;
  delete URLSearchParams.replace;

  class URL {
    #rec;
    #params;
    constructor(url, base) {
      const b = base === undefined ? null : base instanceof URL ? base.#rec : parse(base, null);
      this.#rec = parse(url instanceof URL ? url.href : url, b);
      this.#params = new URLSearchParams(this.#rec.search);
      attachParams(this.#params, (q) => { this.#rec.search = q === "" ? "" : "?" + q; });
    }
    static canParse(url, base) {
      try { new URL(url, base); return true; } catch (e) { return false; }
    }
    static parse(url, base) {
      try { return new URL(url, base); } catch (e) { return null; }
    }
    get href() { return hrefOf(this.#rec); }
    set href(v) {
      this.#rec = parse(v, null);
      replaceParams(this.#params, this.#rec.search.slice(1));
    }
    get origin() {
      const r = this.#rec;
      return r.protocol in SPECIAL && r.protocol !== "file:" ? r.protocol + "//" + hostOf(r) : "null";
    }
    get protocol() { return this.#rec.protocol; }
    set protocol(v) {
      const p = String(v).replace(/:.*$/, "").toLowerCase() + ":";
      if (/^[a-z][a-z0-9+.\-]*:$/.test(p) && ((p in SPECIAL) === (this.#rec.protocol in SPECIAL))) {
        this.#rec.protocol = p;
        if (SPECIAL[p] === this.#rec.port) this.#rec.port = "";
      }
    }
    get username() { return this.#rec.username; }
    set username(v) { if (this.#rec.hasHost) this.#rec.username = encodeSet(String(v), USERINFO_SET); }
    get password() { return this.#rec.password; }
    set password(v) { if (this.#rec.hasHost) this.#rec.password = encodeSet(String(v), USERINFO_SET); }
    get host() { return hostOf(this.#rec); }
    set host(v) {
      if (this.#rec.opaque) return;
      const r = Object.assign({}, this.#rec);
      try { parseAuthority(r, String(v), v); this.#rec = r; } catch (e) { /* ignored, as the web does */ }
    }
    get hostname() { return this.#rec.hostname; }
    set hostname(v) {
      if (this.#rec.opaque) return;
      const r = Object.assign({}, this.#rec);
      try {
        parseAuthority(r, String(v).replace(/:.*$/, "") + (r.port === "" ? "" : ":" + r.port), v);
        this.#rec = r;
      } catch (e) { /* ignored */ }
    }
    get port() { return this.#rec.port; }
    set port(v) {
      const s = String(v);
      if (s === "") { this.#rec.port = ""; return; }
      const m = /^[0-9]+/.exec(s);
      if (m && Number(m[0]) <= 65535) {
        const p = String(Number(m[0]));
        this.#rec.port = SPECIAL[this.#rec.protocol] === p ? "" : p;
      }
    }
    get pathname() { return this.#rec.pathname; }
    set pathname(v) { if (!this.#rec.opaque) setPath(this.#rec, String(v)); }
    get search() { return this.#rec.search.length <= 1 ? "" : this.#rec.search; }
    set search(v) {
      const s = String(v);
      setQuery(this.#rec, s.startsWith("?") ? s.slice(1) : s);
      replaceParams(this.#params, this.#rec.search.slice(1));
    }
    get searchParams() { return this.#params; }
    get hash() { return this.#rec.hash.length <= 1 ? "" : this.#rec.hash; }
    set hash(v) {
      const s = String(v);
      setFragment(this.#rec, s.startsWith("#") ? s.slice(1) : s);
    }
    toString() { return this.href; }
    toJSON() { return this.href; }
  }
  defineProperty(URL.prototype, Symbol.toStringTag, { value: "URL" });
  defineProperty(URLSearchParams.prototype, Symbol.toStringTag, { value: "URLSearchParams" });
  const fixed = (value) => ({ value, writable: false, enumerable: false, configurable: false });
  defineProperty(g, "URL", fixed(URL));
  defineProperty(g, "URLSearchParams", fixed(URLSearchParams));
}
