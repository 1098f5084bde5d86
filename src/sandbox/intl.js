// `Intl.DateTimeFormat`, `Intl.NumberFormat` and the `toLocale*String`
// methods for pattern code: the engine has no `Intl`, and patterns format
// dates and amounts for people. Pure arithmetic and string work over a
// small copy of CLDR 48 data (the data of ICU 78, which V8 uses in Node 20),
// so the output matches V8 byte for byte for the locales below.
//
// Locales: en-US (also "en", and the default), en-GB, en-CA, de-DE ("de"),
// fr-FR ("fr"); any other tag falls back to en-US, and resolvedOptions()
// says so. The default time zone is UTC: the sandbox is deterministic.
// Patterns come from a port of ICU's DateTimePatternGenerator (distance
// matching of skeletons, field-length adjustment, appendItems), so odd
// option combinations come out as V8 prints them, too.
//
// Like V8, format() and toLocale*String() print U+202F (before AM/PM) as
// a plain space; formatToParts() keeps it.
//
// Deliberate differences from V8:
// - Other locales (en-AU, de-AT, es, ...) are formatted as en-US.
// - `era`, `dayPeriod`, `calendar`, `numberingSystem` and Unicode extension
//   keys (-u-hc-...) are ignored; `style: "unit"` and a roundingIncrement
//   other than 1 throw a RangeError.
// - Time-zone names come from a table of common zones (US, Canada,
//   Europe, India, Japan, China, eastern Australia, UTC); other zones print
//   their offset ("GMT+8", "GMT+08:00") where ICU may have a name, and
//   generic names fall back to the offset where ICU says "Germany Time".
//   Only common zone aliases are canonicalized ("Asia/Kolkata" is reported
//   as "Asia/Calcutta", like V8).
// - `formatRange` joins two formatted dates with " – " instead of ICU's
//   interval patterns (which share the common fields); no formatRangeToParts.
// - currencyDisplay "name" knows 9 major currencies; others show the code.
function installIntl(g, defineProperty, zoneOffset) {
  "use strict";
  const { RangeError, TypeError, String, Number, Math, Object, WeakMap, Map } = g;
  const apply = g.Reflect.apply;
  const freeze = Object.freeze;
  const DateProto = g.Date.prototype;
  // Captured now, so pattern code cannot swap what these methods call.
  const getTime = DateProto.getTime;
  const dateNow = g.Date.now;
  const numberValueOf = g.Number.prototype.valueOf;
  const BigIntProto = typeof g.BigInt === "function" ? g.BigInt.prototype : undefined;
  const bigintValueOf = BigIntProto ? BigIntProto.valueOf : undefined;
  const floor = Math.floor, abs = Math.abs;
  const pad = (v, n) => String(v).padStart(n, "0");
  // "k=v;k=v" data strings to objects.
  const table = (s) => { const m = {}; if (s) for (const kv of s.split(";")) { const i = kv.indexOf("="); m[kv.slice(0, i)] = kv.slice(i + 1); } return m; };
  // Fills {0}, {1}, {2} of a CLDR pattern (no "$" replacement surprises).
  const fill = (fmt, a, b, c) => fmt.replace(/\{([012])\}/g, (m, i) => (i === "0" ? a : i === "1" ? b : c));

  // ---------------------------------------------------------------- data
  // Generated from cldr-dates-full 48.0.0 by gen-data.cjs; "SA" lists are
  // the stand-alone forms (used by "L" and "c") where they differ.
  const DATES = {
    "en": {
      months: "January|February|March|April|May|June|July|August|September|October|November|December",
      monthsShort: "Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec",
      monthsNarrow: "J|F|M|A|M|J|J|A|S|O|N|D",
      days: "Sunday|Monday|Tuesday|Wednesday|Thursday|Friday|Saturday",
      daysShort: "Sun|Mon|Tue|Wed|Thu|Fri|Sat",
      daysNarrow: "S|M|T|W|T|F|S",
      ampm: "AM|PM",
      dateStyles: "EEEE, MMMM d, y|MMMM d, y|MMM d, y|M/d/yy",
      timeStyles: "h:mm:ss\u202fa zzzz|h:mm:ss\u202fa z|h:mm:ss\u202fa|h:mm\u202fa",
      glue: "{1} 'at' {0}|{1} 'at' {0}|{1}, {0}|{1}, {0}",
      skeletons: "E=ccc;EHm=E HH:mm;EHms=E HH:mm:ss;Ed=d E;Eh=E h\u202fa;Ehm=E h:mm\u202fa;Ehms=E h:mm:ss\u202fa;H=HH;Hm=HH:mm;Hms=HH:mm:ss;Hmsv=HH:mm:ss v;Hmv=HH:mm v;Hv=HH'h' v;M=L;MEd=E, M/d;MMM=LLL;MMMEd=E, MMM d;MMMMd=MMMM d;MMMd=MMM d;Md=M/d;d=d;h=h\u202fa;hm=h:mm\u202fa;hms=h:mm:ss\u202fa;hmsv=h:mm:ss\u202fa v;hmv=h:mm\u202fa v;hv=h\u202fa v;ms=mm:ss;y=y;yM=M/y;yMEd=E, M/d/y;yMMM=MMM y;yMMMEd=E, MMM d, y;yMMMM=MMMM y;yMMMd=MMM d, y;yMd=M/d/y",
      fieldNames: "month|day|hour|minute|second",
      yearAppend: "{0} {1}",
    },
    "en-GB": {
      monthsShort: "Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sept|Oct|Nov|Dec",
      ampm: "am|pm",
      dateStyles: "EEEE, d MMMM y|d MMMM y|d MMM y|dd/MM/y",
      timeStyles: "HH:mm:ss zzzz|HH:mm:ss z|HH:mm:ss|HH:mm",
      skeletons: "E=ccc;EHm=E HH:mm;EHms=E HH:mm:ss;Ed=E d;Eh=E h\u202fa;Ehm=E h:mm\u202fa;Ehms=E h:mm:ss\u202fa;H=HH;Hm=HH:mm;Hms=HH:mm:ss;Hmsv=HH:mm:ss v;Hmv=HH:mm v;Hv=HH'h' v;M=L;MEd=E dd/MM;MMM=LLL;MMMEEEEd=EEEE d MMM;MMMEd=E d MMM;MMMMEEEEd=EEEE d MMMM;MMMMd=d MMMM;MMMd=d MMM;MMdd=dd/MM;Md=dd/MM;d=d;h=h\u202fa;hm=h:mm\u202fa;hms=h:mm:ss\u202fa;hmsv=h:mm:ss\u202fa v;hmv=h:mm\u202fa v;hv=h\u202fa v;ms=mm:ss;y=y;yM=MM/y;yMEd=E, dd/MM/y;yMMM=MMM y;yMMMEEEEd=EEEE, d MMM y;yMMMEd=E, d MMM y;yMMMM=MMMM y;yMMMMEEEEd=EEEE, d MMMM y;yMMMd=d MMM y;yMd=dd/MM/y",
    },
    "en-CA": {
      ampm: "a.m.|p.m.",
      dateStyles: "EEEE, MMMM d, y|MMMM d, y|MMM d, y|y-MM-dd",
      skeletons: "E=ccc;EHm=E HH:mm;EHms=E HH:mm:ss;Ed=E d;Eh=E h\u202fa;Ehm=E h:mm\u202fa;Ehms=E h:mm:ss\u202fa;H=HH;Hm=HH:mm;Hms=HH:mm:ss;Hmsv=HH:mm:ss v;Hmv=HH:mm v;Hv=HH'h' v;M=L;MEd=E, MM-dd;MMM=LLL;MMMEd=E, MMM d;MMMMd=MMMM d;MMMd=MMM d;MMdd=MM-dd;Md=MM-dd;d=d;h=h\u202fa;hm=h:mm\u202fa;hms=h:mm:ss\u202fa;hmsv=h:mm:ss\u202fa v;hmv=h:mm\u202fa v;hv=h\u202fa v;ms=mm:ss;y=y;yM=y-MM;yMEd=E, y-MM-dd;yMMM=MMM y;yMMMEd=E, MMM d, y;yMMMM=MMMM y;yMMMd=MMM d, y;yMd=y-MM-dd",
    },
    "de": {
      months: "Januar|Februar|März|April|Mai|Juni|Juli|August|September|Oktober|November|Dezember",
      monthsShort: "Jan.|Feb.|März|Apr.|Mai|Juni|Juli|Aug.|Sept.|Okt.|Nov.|Dez.",
      monthsShortSA: "Jan|Feb|Mär|Apr|Mai|Jun|Jul|Aug|Sep|Okt|Nov|Dez",
      monthsNarrow: "J|F|M|A|M|J|J|A|S|O|N|D",
      days: "Sonntag|Montag|Dienstag|Mittwoch|Donnerstag|Freitag|Samstag",
      daysShort: "So.|Mo.|Di.|Mi.|Do.|Fr.|Sa.",
      daysShortSA: "So|Mo|Di|Mi|Do|Fr|Sa",
      daysNarrow: "S|M|D|M|D|F|S",
      ampm: "AM|PM",
      dateStyles: "EEEE, d. MMMM y|d. MMMM y|dd.MM.y|dd.MM.yy",
      timeStyles: "HH:mm:ss zzzz|HH:mm:ss z|HH:mm:ss|HH:mm",
      glue: "{1} 'um' {0}|{1} 'um' {0}|{1}, {0}|{1}, {0}",
      skeletons: "E=ccc;EHm=E, HH:mm;EHms=E, HH:mm:ss;Ed=E, d.;Eh=E, h\u202fa;Ehm=E h:mm\u202fa;Ehms=E, h:mm:ss\u202fa;H=HH 'Uhr';Hm=HH:mm;Hms=HH:mm:ss;Hmsv=HH:mm:ss v;Hmv=HH:mm v;Hv=HH 'Uhr' v;M=L;MEd=E, d.M.;MMM=LLL;MMMEd=E, d. MMM;MMMMEd=E, d. MMMM;MMMMd=d. MMMM;MMMd=d. MMM;MMd=dd.MM.;MMdd=dd.MM.;Md=d.M.;d=d;h=h\u202fa;hm=h:mm\u202fa;hms=h:mm:ss\u202fa;hmsv=h:mm:ss\u202fa v;hmv=h:mm\u202fa v;hv=h\u202fa v;ms=mm:ss;y=y;yM=M/y;yMEd=E, d.M.y;yMM=MM/y;yMMM=MMM y;yMMMEd=E, d. MMM y;yMMMM=MMMM y;yMMMd=d. MMM y;yMMdd=dd.MM.y;yMd=d.M.y",
      fieldNames: "Monat|Tag|Stunde|Minute|Sekunde",
      yearAppend: "{1} {0}",
    },
    "fr": {
      months: "janvier|février|mars|avril|mai|juin|juillet|août|septembre|octobre|novembre|décembre",
      monthsShort: "janv.|févr.|mars|avr.|mai|juin|juil.|août|sept.|oct.|nov.|déc.",
      monthsNarrow: "J|F|M|A|M|J|J|A|S|O|N|D",
      days: "dimanche|lundi|mardi|mercredi|jeudi|vendredi|samedi",
      daysShort: "dim.|lun.|mar.|mer.|jeu.|ven.|sam.",
      daysNarrow: "D|L|M|M|J|V|S",
      ampm: "AM|PM",
      dateStyles: "EEEE d MMMM y|d MMMM y|d MMM y|dd/MM/y",
      timeStyles: "HH:mm:ss zzzz|HH:mm:ss z|HH:mm:ss|HH:mm",
      glue: "{1} 'à' {0}|{1} 'à' {0}|{1}, {0}|{1} {0}",
      skeletons: "E=E;EHm=E HH:mm;EHms=E HH:mm:ss;Ed=E d;Eh=E h\u202fa;Ehm=E h:mm\u202fa;Ehms=E h:mm:ss\u202fa;H=HH 'h';Hm=HH:mm;Hms=HH:mm:ss;Hmsv=HH:mm:ss v;Hmv=HH:mm v;Hv=HH 'h' v;M=L;MEd=E dd/MM;MMM=LLL;MMMEd=E d MMM;MMMMd=d MMMM;MMMd=d MMM;Md=dd/MM;d=d;h=h\u202fa;hm=h:mm\u202fa;hms=h:mm:ss\u202fa;hmsv=h:mm:ss\u202fa v;hmv=h:mm\u202fa v;hv=h\u202fa v;ms=mm:ss;y=y;yM=MM/y;yMEd=E dd/MM/y;yMMM=MMM y;yMMMEd=E d MMM y;yMMMM=MMMM y;yMMMd=d MMM y;yMd=dd/MM/y",
      fieldNames: "mois|jour|heure|minute|seconde",
      yearAppend: "{1} {0}",
    },
  };

  // Time zones: a metazone's standard offset (minutes; a larger offset
  // means summer time) and its zones, "@ms" where a zone joins it after
  // 1970. ICU names zones by metazone only from 1970 to 9999; London has
  // its own summer names.
  const METAZONES = {
    Pacific: [-480, "America/Los_Angeles America/Vancouver America/Tijuana"],
    Mountain: [-420, "America/Denver America/Phoenix America/Edmonton America/Boise"],
    Central: [-360, "America/Chicago America/Winnipeg America/Mexico_City"],
    Eastern: [-300, "America/New_York America/Toronto America/Detroit"],
    Alaska: [-540, "America/Anchorage@439030800000"], Hawaii: [-600, "Pacific/Honolulu"],
    CET: [60, "Europe/Lisbon Europe/Lisbon@717555600000 Europe/Berlin Europe/Paris Europe/Madrid Europe/Rome Europe/Amsterdam Europe/Brussels Europe/Vienna Europe/Zurich Europe/Stockholm Europe/Oslo Europe/Copenhagen Europe/Warsaw Europe/Prague Europe/Budapest"],
    WET: [0, "Europe/Lisbon@212544000000 Europe/Lisbon@828234000000"], EET: [120, "Europe/Athens Europe/Helsinki Europe/Kiev@646783200000 Europe/Bucharest"],
    GMT: [0, "Atlantic/Reykjavik Africa/Abidjan"], London: [0, "Europe/London@57722400000"],
    India: [330, "Asia/Kolkata Asia/Calcutta"], AusEast: [600, "Australia/Sydney Australia/Melbourne Australia/Brisbane"],
    Japan: [540, "Asia/Tokyo"], China: [480, "Asia/Shanghai"], UTC: [0, "UTC"],
  };
  // ICU's canonical IDs, which V8 reports (and our names table knows).
  const ZONE_ALIASES = table("Asia/Kolkata=Asia/Calcutta;Asia/Kathmandu=Asia/Katmandu;Asia/Ho_Chi_Minh=Asia/Saigon;Europe/Kyiv=Europe/Kiev;Asia/Yangon=Asia/Rangoon;America/Nuuk=America/Godthab;Atlantic/Faroe=Atlantic/Faeroe;US/Pacific=America/Los_Angeles;US/Mountain=America/Denver;US/Central=America/Chicago;US/Eastern=America/New_York;US/Arizona=America/Phoenix;US/Hawaii=Pacific/Honolulu;US/Alaska=America/Anchorage;GB=Europe/London;Etc/UTC=UTC;Etc/GMT=UTC");
  const ZONES = new Map();
  for (const mz in METAZONES) {
    for (const z of METAZONES[mz][1].split(" ")) {
      const [name, from] = z.split("@"), list = ZONES.get(name) || [];
      list.push([Number(from || 0), mz]);
      ZONES.set(name, list.sort((a, b) => a[0] - b[0]));
    }
  }
  // Long names per language: standard|daylight|generic.
  const TZ_LONG = {
    en: "Pacific=Pacific Standard Time|Pacific Daylight Time|Pacific Time;Mountain=Mountain Standard Time|Mountain Daylight Time|Mountain Time;Central=Central Standard Time|Central Daylight Time|Central Time;Eastern=Eastern Standard Time|Eastern Daylight Time|Eastern Time;Alaska=Alaska Standard Time|Alaska Daylight Time|Alaska Time;Hawaii=Hawaii-Aleutian Standard Time|Hawaii-Aleutian Daylight Time|Hawaii-Aleutian Time;CET=Central European Standard Time|Central European Summer Time|Central European Time;WET=Western European Standard Time|Western European Summer Time|Western European Time;EET=Eastern European Standard Time|Eastern European Summer Time|Eastern European Time;GMT=Greenwich Mean Time;India=India Standard Time;AusEast=Australian Eastern Standard Time|Australian Eastern Daylight Time|Australian Eastern Time;Japan=Japan Standard Time|Japan Daylight Time|Japan Time;China=China Standard Time|China Daylight Time|China Time;London=Greenwich Mean Time|British Summer Time;UTC=Coordinated Universal Time",
    de: "Pacific=Nordamerikanische Westküsten-Normalzeit|Nordamerikanische Westküsten-Sommerzeit|Nordamerikanische Westküstenzeit;Mountain=Rocky-Mountains-Normalzeit|Rocky-Mountains-Sommerzeit|Rocky-Mountains-Zeit;Central=Nordamerikanische Zentral-Normalzeit|Nordamerikanische Zentral-Sommerzeit|Nordamerikanische Zentralzeit;Eastern=Nordamerikanische Ostküsten-Normalzeit|Nordamerikanische Ostküsten-Sommerzeit|Nordamerikanische Ostküstenzeit;Alaska=Alaska-Normalzeit|Alaska-Sommerzeit|Alaska-Zeit;Hawaii=Hawaii-Aleuten-Normalzeit|Hawaii-Aleuten-Sommerzeit|Hawaii-Aleuten-Zeit;CET=Mitteleuropäische Normalzeit|Mitteleuropäische Sommerzeit|Mitteleuropäische Zeit;WET=Westeuropäische Normalzeit|Westeuropäische Sommerzeit|Westeuropäische Zeit;EET=Osteuropäische Normalzeit|Osteuropäische Sommerzeit|Osteuropäische Zeit;GMT=Mittlere Greenwich-Zeit;India=Indische Normalzeit;AusEast=Ostaustralische Normalzeit|Ostaustralische Sommerzeit|Ostaustralische Zeit;Japan=Japanische Normalzeit|Japanische Sommerzeit|Japanische Zeit;China=Chinesische Normalzeit|Chinesische Sommerzeit|Chinesische Zeit;London=Mittlere Greenwich-Zeit|Britische Sommerzeit;UTC=Koordinierte Weltzeit",
    fr: "Pacific=heure normale du Pacifique nord-américain|heure d\u2019été du Pacifique nord-américain|heure du Pacifique nord-américain;Mountain=heure normale des Rocheuses|heure d\u2019été des Rocheuses|heure des Rocheuses;Central=heure normale du centre nord-américain|heure d\u2019été du centre nord-américain|heure du centre nord-américain;Eastern=heure normale de l\u2019Est nord-américain|heure d\u2019été de l\u2019Est nord-américain|heure de l\u2019Est nord-américain;Alaska=heure normale de l\u2019Alaska|heure d\u2019été de l\u2019Alaska|heure de l\u2019Alaska;Hawaii=heure normale d\u2019Hawaï - Aléoutiennes|heure d\u2019été d\u2019Hawaï - Aléoutiennes|heure d\u2019Hawaï - Aléoutiennes;CET=heure normale d\u2019Europe centrale|heure d\u2019été d\u2019Europe centrale|heure d\u2019Europe centrale;WET=heure normale d\u2019Europe de l\u2019Ouest|heure d\u2019été d\u2019Europe de l\u2019Ouest|heure d\u2019Europe de l\u2019Ouest;EET=heure normale d\u2019Europe de l\u2019Est|heure d\u2019été d\u2019Europe de l\u2019Est|heure d\u2019Europe de l\u2019Est;GMT=heure moyenne de Greenwich;India=heure de l\u2019Inde;AusEast=heure normale de l\u2019Est de l\u2019Australie|heure d\u2019été de l\u2019Est de l\u2019Australie|heure de l\u2019Est de l\u2019Australie;Japan=heure normale du Japon|heure d\u2019été du Japon|heure du Japon;China=heure normale de la Chine|heure d\u2019été de Chine|heure de la Chine;London=heure moyenne de Greenwich|heure d\u2019été britannique;UTC=temps universel coordonné",
  };
  // Short names exist only where a locale's people use them (ICU's rule).
  const US_SHORT = "Pacific=PST|PDT|PT;Mountain=MST|MDT|MT;Central=CST|CDT|CT;Eastern=EST|EDT|ET;Alaska=AKST|AKDT|AKT;Hawaii=HST|HDT;GMT=GMT;London=GMT;UTC=UTC";
  const TZ_SHORT = {
    "en-US": US_SHORT, "en-CA": US_SHORT, de: "CET=MEZ|MESZ|MEZ;WET=WEZ|WESZ|WEZ;EET=OEZ|OESZ|OEZ;UTC=UTC", fr: "UTC=UTC",
    "en-GB": "CET=CET|CEST|CET;WET=WET|WEST|WET;EET=EET|EEST|EET;GMT=GMT;London=GMT|BST;UTC=UTC",
  };

  // Numbers: symbols, where percent and currency signs go, compact forms
  // (thousand|million|billion|trillion; "" = not compacted; "one/other").
  const NUMBERS = {
    en: { dec: ".", grp: ",", pct: "%", cur: "prefix", acc: "()", short: "K|M|B|T",
      long: " thousand| million| billion| trillion" },
    "en-GB": { short: "k|m|bn|tn" },
    de: { dec: ",", grp: ".", pct: "\u00a0%", cur: "suffix", acc: "", short: "|\u00a0Mio.|\u00a0Mrd.|\u00a0Bio.",
      long: " Tausend| Million/ Millionen| Milliarde/ Milliarden| Billion/ Billionen" },
    fr: { dec: ",", grp: "\u202f", pct: "\u00a0%", cur: "suffix", acc: "()", short: "\u00a0k|\u00a0M|\u00a0Md|\u00a0Bn",
      long: " millier/ mille/mille| million/ millions| milliard/ milliards| billion/ billions" }, // "mille" alone for exactly 1000
  };
  const CURRENCIES = {
    en: "USD=$;EUR=€;GBP=£;JPY=¥;CAD=CA$;AUD=A$;CNY=CN¥;INR=₹;MXN=MX$;KRW=₩;BRL=R$;HKD=HK$;NZD=NZ$;ILS=₪;TWD=NT$;VND=₫;PHP=₱",
    "en-GB": "USD=US$;JPY=JP¥", "en-CA": "USD=US$;JPY=JP¥;CAD=$", de: "AUD=AU$;PHP=PHP",
    fr: "USD=$US;GBP=£GB;JPY=JPY;CAD=$CA;AUD=$AU;CNY=CNY;MXN=$MX;HKD=HKD;NZD=$NZ;TWD=TWD;ILS=₪;PHP=PHP",
  };
  const NARROW = "USD=$;EUR=€;GBP=£;JPY=¥;CAD=$;AUD=$;CNY=¥;INR=₹;MXN=$;KRW=₩;BRL=R$;HKD=$;NZD=$;ILS=₪;TWD=$;VND=₫;PHP=₱;SEK=kr;NOK=kr;DKK=kr";
  // currencyDisplay "name": one/other (one form only when they agree).
  const CURRENCY_NAMES = {
    en: "USD=US dollar/US dollars;EUR=euro/euros;GBP=British pound/British pounds;JPY=Japanese yen;CAD=Canadian dollar/Canadian dollars;AUD=Australian dollar/Australian dollars;INR=Indian rupee/Indian rupees;CNY=Chinese yuan;MXN=Mexican peso/Mexican pesos",
    de: "USD=US-Dollar;EUR=Euro;GBP=Britisches Pfund/Britische Pfund;JPY=Japanischer Yen/Japanische Yen;CAD=Kanadischer Dollar/Kanadische Dollar;AUD=Australischer Dollar/Australische Dollar;INR=Indische Rupie/Indische Rupien;CNY=Chinesischer Yuan/Renminbi Yuan;MXN=Mexikanischer Peso/Mexikanische Pesos",
    fr: "USD=dollar des États-Unis/dollars des États-Unis;EUR=euro/euros;GBP=livre sterling/livres sterling;JPY=yen japonais/yens japonais;CAD=dollar canadien/dollars canadiens;AUD=dollar australien/dollars australiens;INR=roupie indienne/roupies indiennes;CNY=yuan renminbi chinois/yuans renminbi chinois;MXN=peso mexicain/pesos mexicains",
  };
  const DIGITS0 = " ADP AFN ALL BIF BYR CLP COP DJF ESP GNF HUF IDR IQD IRR ISK ITL JPY KMF KPW KRW LAK LBP LUF MGA MGF MMK MRO PKR PYG RSD RWF SLL SOS STD SYP TMM TRL UGX UYI VND VUV XAF XOF XPF YER ZMK ZWD ";
  const DIGITS3 = " BHD JOD KWD LYD OMR TND ", DIGITS4 = " CLF UYW ";

  const LOCALE_DATA = {};
  const localeData = (tag) => {
    if (LOCALE_DATA[tag]) return LOCALE_DATA[tag];
    const lang = tag.slice(0, 2);
    const d = Object.assign({}, DATES[lang], DATES[tag]);
    const list = (k) => d[k].split("|");
    const loc = {
      tag, lang, months: list("months"), monthsShort: list("monthsShort"), monthsShortSA: list(d.monthsShortSA ? "monthsShortSA" : "monthsShort"),
      monthsNarrow: list("monthsNarrow"), days: list("days"), daysShort: list("daysShort"),
      daysShortSA: list(d.daysShortSA ? "daysShortSA" : "daysShort"), daysNarrow: list("daysNarrow"), ampm: list("ampm"),
      dateStyles: list("dateStyles"), timeStyles: list("timeStyles"), glue: list("glue"), skeletons: d.skeletons,
      fieldNames: list("fieldNames"), yearAppend: d.yearAppend,
      hourChar: tag === "en-US" || tag === "en-CA" ? "h" : "H",
      gmt: lang === "fr" ? "UTC{0}" : "GMT{0}", minus: lang === "fr" ? "\u2212" : "-",
      tzLong: table(TZ_LONG[lang]), tzShort: table(TZ_SHORT[tag] || TZ_SHORT[lang]),
      num: Object.assign({}, NUMBERS[lang], NUMBERS[tag]),
      currencies: Object.assign(table(CURRENCIES.en), table(CURRENCIES[lang]), table(CURRENCIES[tag])),
      cache: new Map(),
    };
    return (LOCALE_DATA[tag] = loc);
  };

  // ------------------------------------------------------------- locales
  const SUPPORTED = { "en-US": "en-US", "en-GB": "en-GB", "en-CA": "en-CA", "de-DE": "de-DE", "fr-FR": "fr-FR", en: "en-US", de: "de-DE", fr: "fr-FR" };
  const TAG_RE = /^[a-z]{2,3}(-[a-z]{4})?(-([a-z]{2}|[0-9]{3}))?(-([a-z0-9]{5,8}|[0-9][a-z0-9]{3}))*(-[0-9a-wyz](-[a-z0-9]{2,8})+)*(-x(-[a-z0-9]{1,8})+)?$/;
  const canonicalTag = (t) => {
    if (typeof t !== "string" && (typeof t !== "object" || t === null)) throw new TypeError("Language ID should be string or object.");
    const s = String(t).toLowerCase();
    if (!TAG_RE.test(s)) throw new RangeError("Incorrect locale information provided");
    const parts = s.split("-");
    for (let i = 1; i < parts.length && parts[i].length > 1; i++) {
      if (parts[i].length === 4 && i === 1) parts[i] = parts[i][0].toUpperCase() + parts[i].slice(1);
      else if (parts[i].length === 2) parts[i] = parts[i].toUpperCase();
    }
    return parts.join("-");
  };
  const canonicalList = (locales) => {
    if (locales === undefined) return [];
    const list = typeof locales === "string" ? [locales] : Object(locales);
    const out = [];
    for (let i = 0, n = list.length >>> 0; i < n; i++) {
      if (!(i in list)) continue;
      const t = canonicalTag(list[i]);
      if (!out.includes(t)) out.push(t);
    }
    return out;
  };
  // The first requested tag we have data for (extensions dropped), else en-US.
  const supportedTag = (t) => { const base = t.split(/-[a-wyz0-9]-|-x-/)[0]; return SUPPORTED[base] ? base : undefined; };
  const resolveLocale = (locales) => {
    for (const t of canonicalList(locales)) { const base = supportedTag(t); if (base) return [base, SUPPORTED[base]]; }
    return ["en-US", "en-US"];
  };

  // ------------------------------------------------------------ options
  const toOptions = (o) => {
    if (o === null) throw new TypeError("Cannot convert undefined or null to object");
    return o === undefined ? Object.create(null) : Object(o);
  };
  const getOption = (opts, prop, values, fallback, owner) => {
    let v = opts[prop];
    if (v === undefined) return fallback;
    if (values === "boolean") return !!v;
    v = String(v);
    if (values && !values.includes(v)) throw new RangeError("Value " + v + " out of range for " + owner + " options property " + prop);
    return v;
  };
  const getNumberOption = (opts, prop, min, max, fallback) => {
    let v = opts[prop];
    if (v === undefined) return fallback;
    v = Number(v);
    if (v !== v || v < min || v > max) throw new RangeError(prop + " value is out of range.");
    return floor(v);
  };

  // ----------------------------------------- ICU DateTimePatternGenerator
  // A port of the parts V8 uses: skeletons are matched to the locale's
  // patterns by a field-type distance, lengths adjusted, missing fields
  // appended. Field numbers and type codes are ICU's.
  const YEAR = 1, MONTH = 3, WEEKDAY = 6, DAY = 9, DAYPERIOD = 10, HOUR = 11, MINUTE = 12, SECOND = 13, FRAC = 14, ZONE = 15;
  const NUM = 0x100, DELTA = 0x10, NARROW_T = -0x101, SHORTER = -0x102, SHORT = -0x103, LONG = -0x104;
  // [char, field, type, minimum length], rows of one char by length.
  const TYPES = [
    ["y", YEAR, NUM, 1], ["M", MONTH, NUM, 1], ["M", MONTH, SHORT, 3], ["M", MONTH, LONG, 4], ["M", MONTH, NARROW_T, 5],
    ["L", MONTH, NUM + DELTA, 1], ["L", MONTH, SHORT - DELTA, 3], ["L", MONTH, LONG - DELTA, 4], ["L", MONTH, NARROW_T - DELTA, 5],
    ["E", WEEKDAY, SHORT, 1], ["E", WEEKDAY, LONG, 4], ["E", WEEKDAY, NARROW_T, 5], ["E", WEEKDAY, SHORTER, 6],
    ["c", WEEKDAY, NUM + 2 * DELTA, 1], ["c", WEEKDAY, SHORT - 2 * DELTA, 3], ["c", WEEKDAY, LONG - 2 * DELTA, 4], ["c", WEEKDAY, NARROW_T - 2 * DELTA, 5],
    ["d", DAY, NUM, 1], ["a", DAYPERIOD, SHORT, 1], ["a", DAYPERIOD, LONG, 4], ["a", DAYPERIOD, NARROW_T, 5],
    ["H", HOUR, NUM + 10 * DELTA, 1], ["k", HOUR, NUM + 11 * DELTA, 1], ["h", HOUR, NUM, 1], ["K", HOUR, NUM + DELTA, 1],
    ["m", MINUTE, NUM, 1], ["s", SECOND, NUM, 1], ["S", FRAC, NUM, 1],
    ["v", ZONE, SHORT - 2 * DELTA, 1], ["v", ZONE, LONG - 2 * DELTA, 4], ["z", ZONE, SHORT, 1], ["z", ZONE, LONG, 4],
    ["O", ZONE, SHORT - DELTA, 1], ["O", ZONE, LONG - DELTA, 4],
  ];
  const typeRow = (c, n) => { let best; for (const r of TYPES) if (r[0] === c && r[3] <= n) best = r; return best; };
  // Splits a pattern into fields ({f, n}) and literal runs ({raw, text}).
  const lex = (p) => {
    const out = [];
    let raw = "", text = "";
    const flush = () => { if (raw) out.push({ raw, text }); raw = text = ""; };
    for (let i = 0; i < p.length;) {
      const c = p[i];
      if (c === "'") {
        let j = i + 1;
        if (p[j] === "'") { raw += "''"; text += "'"; i += 2; continue; }
        for (; j < p.length; j++) {
          if (p[j] === "'") { if (p[j + 1] === "'") { text += "'"; j++; continue; } break; }
          text += p[j];
        }
        raw += p.slice(i, j + 1); i = j + 1;
      } else if ((c >= "a" && c <= "z") || (c >= "A" && c <= "Z")) {
        let j = i; while (p[j] === c) j++;
        flush(); out.push({ f: c, n: j - i }); i = j;
      } else { raw += c; text += c; i++; }
    }
    flush();
    return out;
  };
  // ICU's DateTimeMatcher::set: one entry per field, plus the implied
  // day period of a 12-hour clock and the seconds that fractions need.
  const skeleton = (p) => {
    const s = { type: [], ch: [], len: [], base: "" };
    for (let i = 0; i < 16; i++) { s.type[i] = 0; s.ch[i] = ""; s.len[i] = 0; }
    const set = (f, c, n, t) => { s.ch[f] = c; s.len[f] = n; s.type[f] = t; };
    const bases = [];
    for (const t of lex(p)) {
      const r = t.f && typeRow(t.f, t.n);
      if (!r) continue;
      set(r[1], t.f, t.n, r[2] > 0 ? r[2] + t.n : r[2]);
      bases[r[1]] = r[0].repeat(r[3]);
    }
    if (s.len[MINUTE] && s.len[FRAC] && !s.len[SECOND]) { set(SECOND, "s", 1, NUM + 1); bases[SECOND] = "s"; }
    if (s.len[HOUR]) {
      if (s.ch[HOUR] === "h" || s.ch[HOUR] === "K") {
        if (!s.len[DAYPERIOD]) { set(DAYPERIOD, "a", 1, SHORT); bases[DAYPERIOD] = "a"; }
      } else { set(DAYPERIOD, "", 0, 0); bases[DAYPERIOD] = ""; }
    }
    s.base = bases.join("");
    s.orig = s.ch.map((c, i) => c.repeat(s.len[i])).join("");
    return s;
  };
  // The locale's pattern list in ICU's iteration order: canonical single
  // fields, the style patterns, then availableFormats (which override).
  const generator = (loc) => {
    if (loc.entries) return loc.entries;
    const entries = [];
    const add = (pattern, skel, override) => {
      const s = skeleton(skel || pattern);
      const sameBase = entries.find((e) => e.s.base === s.base);
      if (sameBase && !override && (!sameBase.specified || skel)) return;
      const sameSkel = entries.find((e) => e.s.orig === s.orig && e.s.base[0] === s.base[0]);
      if (sameSkel && (!override || (skel && sameSkel.specified))) return;
      const dup = entries.find((e) => e.s.base === s.base && e.s.type.join() === s.type.join());
      if (dup) { dup.pattern = pattern; dup.specified = !!skel; return; } // ICU keeps the old skeleton
      entries.push({ s, pattern, specified: !!skel, seq: entries.length });
    };
    for (const c of "yMEdaHmsSv") add(c, null, false);
    for (const p of loc.timeStyles) add(p, null, false);
    for (const p of loc.dateStyles) add(p, null, false);
    for (const kv of loc.skeletons.split(";")) { const i = kv.indexOf("="); add(kv.slice(i + 1), kv.slice(0, i), true); }
    const bucket = (e) => { const c = e.s.base.charCodeAt(0); return c >= 97 ? c - 97 + 26 : c - 65; };
    entries.sort((a, b) => bucket(a) - bucket(b) || a.seq - b.seq);
    return (loc.entries = entries);
  };
  const bestRaw = (loc, req, mask) => {
    let best, bestDist = Infinity, bestMissing = -1;
    for (const e of generator(loc)) {
      let dist = 0, missing = 0, extra = 0;
      for (let i = 0; i < 16; i++) {
        const mine = mask & (1 << i) ? req.type[i] : 0, other = e.s.type[i];
        if (mine === other) continue;
        if (mine === 0) { dist += 0x10000; extra |= 1 << i; } else if (other === 0) { dist += 0x1000; missing |= 1 << i; } else dist += abs(mine - other);
      }
      if (dist < bestDist || (dist === bestDist && bestMissing < missing)) {
        best = { pattern: e.pattern, spec: e.specified ? e.s : null, missing, extra };
        bestDist = dist; bestMissing = missing;
        if (dist === 0) break;
      }
    }
    return best;
  };
  // ICU's adjustFieldTypes with UDATPG_MATCH_HOUR_FIELD_LENGTH (V8's flag).
  const adjust = (loc, req, pattern, spec, fixFraction) => {
    let out = "";
    for (const t of lex(pattern)) {
      if (!t.f) { out += t.raw; continue; }
      const r = typeRow(t.f, t.n);
      let field = t.f.repeat(t.n);
      if (r && fixFraction && r[1] === SECOND) field += loc.num.dec + "S".repeat(req.len[FRAC]);
      else if (r && req.type[r[1]] !== 0) {
        const f = r[1], rc = req.ch[f];
        let rl = req.len[f];
        if (rc === "E" && rl < 3) rl = 3;
        let n = rl;
        if (f === MINUTE || f === SECOND) n = t.n;
        else if (spec && rc !== "c" && rc !== "e" && (spec.len[f] === rl || (r[2] > 0) !== (req.type[f] > 0))) n = t.n;
        let c = f !== HOUR && f !== MONTH && f !== WEEKDAY && f !== YEAR ? rc : t.f;
        if (c === "E" && n < 3) c = "e";
        if (f === HOUR) {
          const dc = loc.hourChar;
          if (rc === dc) c = dc;
          else if (rc === "k" && dc === "H") c = "H";
          else if (rc === "K" && dc === "h") c = "h";
        }
        field = c.repeat(n);
      }
      out += field;
    }
    return out;
  };
  const bestAppending = (loc, req, fields) => {
    if (!fields) return "";
    let r = bestRaw(loc, req, fields);
    let result = adjust(loc, req, r.pattern, r.spec, false), missing = r.missing, last = 0;
    while (missing && missing !== last) {
      if ((missing & 0x6000) === 0x4000 && (fields & 0x6000) === 0x6000) {
        result = adjust(loc, req, result, r.spec, true); missing &= ~0x4000; continue;
      }
      const start = missing;
      r = bestRaw(loc, req, missing);
      const part = adjust(loc, req, r.pattern, r.spec, false);
      let top = 0; for (let found = start & ~r.missing; found > 1; found >>= 1) top++;
      // CLDR appendItems; fields without one (fractions) get ICU's default.
      const name = top === MONTH || top === DAY || (top >= HOUR && top <= SECOND) ? loc.fieldNames[top === MONTH ? 0 : top === DAY ? 1 : top - HOUR + 2] : "F" + top;
      const format = top === YEAR ? loc.yearAppend : top === WEEKDAY || top === ZONE || top === 0 ? "{0} {1}"
        : top === FRAC || top === DAYPERIOD ? "{0} \u251c{2}: {1}\u2524" : "{0} ({2}: {1})";
      result = fill(format, result, part, "'" + name + "'");
      last = missing = r.missing;
    }
    return result;
  };
  const bestPattern = (loc, skel) => {
    const cached = loc.cache.get(skel);
    if (cached !== undefined) return cached;
    const req = skeleton(skel);
    const r = skel && bestRaw(loc, req, -1);
    let p;
    if (!skel) p = ""; // only options we ignore (era, dayPeriod)
    else if (!r.missing && !r.extra) p = adjust(loc, req, r.pattern, r.spec, false);
    else {
      let mask = 0; for (let i = 0; i < 16; i++) if (req.type[i]) mask |= 1 << i;
      const date = bestAppending(loc, req, mask & 0x3ff), time = bestAppending(loc, req, mask & ~0x3ff);
      const m = req.len[MONTH] >= 5 ? 0 : req.len[MONTH];
      const style = m === 4 ? (req.len[WEEKDAY] ? 0 : 1) : m === 3 ? 2 : 3;
      p = !date ? time : !time ? date : fill(loc.glue[style], time, date);
    }
    loc.cache.set(skel, p);
    return p;
  };

  // ------------------------------------------------------ V8's layer on it
  const HC_CHAR = { h11: "K", h12: "h", h23: "H", h24: "k" };
  const hourCycleOf = (p) => { for (const t of lex(p)) if (t.f && "hHkK".includes(t.f)) return { h: "h12", H: "h23", k: "h24", K: "h11" }[t.f]; };
  // V8 forces the resolved hour cycle onto the pattern ICU returns.
  const withHourCycle = (p, hc) => {
    let out = "", quoted = false, last = "";
    for (const ch of p) {
      if (ch === "'") quoted = !quoted;
      else if (!quoted && "hHkK".includes(ch)) { if (last === "d") out += " "; out += HC_CHAR[hc]; last = ch; continue; }
      out += ch; last = ch;
    }
    return out;
  };
  const STYLES = ["full", "long", "medium", "short"];
  const stylePattern = (loc, ds, ts, hc) => {
    const d = STYLES.indexOf(ds), t = STYLES.indexOf(ts);
    const p = d >= 0 && t >= 0 ? fill(loc.glue[d], loc.timeStyles[t], loc.dateStyles[d]) : d >= 0 ? loc.dateStyles[d] : loc.timeStyles[t];
    if (t < 0 || hourCycleOf(p) === hc) return p;
    // Another hour cycle: ask the generator for the same fields (minus the
    // day period) with the requested hour character, as V8 does.
    const s = skeleton(p);
    let sk = "";
    for (let i = 0; i < 16; i++) if (i !== DAYPERIOD) sk += (i === HOUR ? HC_CHAR[hc] : s.ch[i]).repeat(s.len[i]);
    return withHourCycle(bestPattern(loc, sk), hc);
  };

  // --------------------------------------------------------- time zones
  const canonicalZone = (tz) => {
    const up = tz.toUpperCase();
    if (up === "UTC" || up === "GMT" || up === "ETC/UTC" || up === "ETC/GMT") return "UTC";
    // Title-case each word like V8 ("america/los_angeles" -> "America/Los_Angeles").
    return tz.replace(/[A-Za-z]+/g, (w) => (/^(of|es|au)$/i.test(w) && w.length === 2 ? w.toLowerCase() : w[0].toUpperCase() + w.slice(1).toLowerCase()));
  };
  const offsetAt = (tz, t) => {
    if (tz === "UTC") return 0;
    let off;
    try { off = zoneOffset(tz, t); } catch (e) { off = undefined; }
    if (typeof off !== "number" || off !== off) throw new RangeError("Invalid time zone specified: " + tz);
    return off;
  };
  // "GMT-8", "GMT+5:30", "GMT-08:00"; seconds for old local mean times.
  const gmtName = (loc, off, long) => {
    const a = Math.round(abs(off) * 60), h = floor(a / 3600), m = floor(a / 60) % 60, sec = a % 60;
    const body = (long ? pad(h, 2) + ":" + pad(m, 2) : h + (m || sec ? ":" + pad(m, 2) : "")) + (sec ? ":" + pad(sec, 2) : "");
    return loc.gmt.replace("{0}", (off < 0 ? loc.minus : "+") + body);
  };
  // z: specific name, v: generic name, O: offset. Names hold while the
  // zone keeps its metazone's offsets (not, say, for 1800's local mean
  // time); otherwise, and for zones we have no names for, the offset.
  const zoneName = (loc, tz, off, f, n, t) => {
    const long = n >= 4;
    let mz;
    for (const [from, m] of ZONES.get(tz) || []) if (t >= from && t < 253402300740000) mz = m;
    // UTC's names and London's summer names belong to the zone, not a
    // metazone: they hold at any date (London's +1 or wartime +2, but not
    // 1968-71, when +1 was standard time).
    if (tz === "UTC" || (tz === "Europe/London" && off > 0 && !(t >= -37242000000 && t < 57722400000))) mz = tz === "UTC" ? "UTC" : "London";
    const std = mz && METAZONES[mz][0];
    const names = mz && f !== "O" && (off === std || off === std + 60 || mz === "London") && (long ? loc.tzLong : loc.tzShort)[mz];
    if (names) {
      const list = names.split("|");
      const name = f === "v" ? list[2] : off > std ? list[1] : list[0];
      if (name) return name;
    }
    return gmtName(loc, off, long);
  };

  // ------------------------------------------------------ date formatting
  // Proleptic Gregorian fields of a local time (days since 1970 to civil).
  const fields = (t, off) => {
    const local = t + Math.round(off * 60000), days = floor(local / 86400000);
    let ms = local - days * 86400000;
    const z = days + 719468, era = floor(z / 146097), doe = z - era * 146097;
    const yoe = floor((doe - floor(doe / 1460) + floor(doe / 36524) - floor(doe / 146096)) / 365);
    const doy = doe - (365 * yoe + floor(yoe / 4) - floor(yoe / 100)), mp = floor((5 * doy + 2) / 153);
    const month = mp < 10 ? mp + 3 : mp - 9;
    const hour = floor(ms / 3600000); ms -= hour * 3600000;
    const minute = floor(ms / 60000); ms -= minute * 60000;
    const second = floor(ms / 1000);
    return { year: yoe + era * 400 + (month <= 2 ? 1 : 0), month, day: doy - floor((153 * mp + 2) / 5) + 1,
      weekday: (((days + 4) % 7) + 7) % 7, hour, minute, second, ms: ms - second * 1000 };
  };
  const PART = { y: "year", M: "month", L: "month", d: "day", E: "weekday", c: "weekday", a: "dayPeriod",
    h: "hour", H: "hour", k: "hour", K: "hour", m: "minute", s: "second", S: "fractionalSecond", z: "timeZoneName", v: "timeZoneName", O: "timeZoneName" };
  const fieldText = (loc, f, n, c, tz, off, t) => {
    switch (f) {
      case "y": { const y = c.year <= 0 ? 1 - c.year : c.year; return n === 2 ? pad(y % 100, 2) : pad(y, n); }
      case "M": case "L":
        return n <= 2 ? pad(c.month, n) : (n === 3 ? (f === "L" ? loc.monthsShortSA : loc.monthsShort) : n === 4 ? loc.months : loc.monthsNarrow)[c.month - 1];
      case "d": return pad(c.day, n);
      case "E": case "c": return (n === 4 ? loc.days : n === 5 ? loc.daysNarrow : f === "c" ? loc.daysShortSA : loc.daysShort)[c.weekday];
      case "a": return loc.ampm[c.hour < 12 ? 0 : 1];
      case "h": return pad(c.hour % 12 || 12, n);
      case "H": return pad(c.hour, n);
      case "k": return pad(c.hour || 24, n);
      case "K": return pad(c.hour % 12, n);
      case "m": return pad(c.minute, n);
      case "s": return pad(c.second, n);
      case "S": return (pad(c.ms, 3) + "000").slice(0, n);
      default: return zoneName(loc, tz, off, f, n, t);
    }
  };
  const formatDateParts = (st, t) => {
    const off = offsetAt(st.zone, t), c = fields(t, off), parts = [];
    for (const tok of st.tokens) {
      if (!tok.f) { const last = parts[parts.length - 1]; if (last && last.type === "literal") last.value += tok.text; else parts.push({ type: "literal", value: tok.text }); continue; }
      parts.push({ type: PART[tok.f] || "literal", value: fieldText(st.loc, tok.f, tok.n, c, st.timeZone, off, t) });
    }
    return parts;
  };
  const joinParts = (parts) => { let s = ""; for (const p of parts) s += p.value; return s; };
  const timeClip = (x) => {
    const t = Number(x);
    if (t !== t || abs(t) > 8.64e15) throw new RangeError("Invalid time value");
    return t < 0 ? -floor(-t) : floor(t);
  };

  // ------------------------------------------------------ DateTimeFormat
  const DTF_STATE = new WeakMap();
  const DATE_FIELDS = [["weekday", ["narrow", "short", "long"]], ["era", ["narrow", "short", "long"]], ["year", ["2-digit", "numeric"]],
    ["month", ["2-digit", "numeric", "narrow", "short", "long"]], ["day", ["2-digit", "numeric"]], ["dayPeriod", ["narrow", "short", "long"]],
    ["hour", ["2-digit", "numeric"]], ["minute", ["2-digit", "numeric"]], ["second", ["2-digit", "numeric"]], ["fractionalSecondDigits"],
    ["timeZoneName", ["short", "long", "shortOffset", "longOffset", "shortGeneric", "longGeneric"]]];
  const SKELETON = { weekday: { narrow: "EEEEE", long: "EEEE", short: "EEE" }, year: { "2-digit": "yy", numeric: "y" },
    month: { narrow: "MMMMM", long: "MMMM", short: "MMM", "2-digit": "MM", numeric: "M" }, day: { "2-digit": "dd", numeric: "d" },
    minute: { "2-digit": "mm", numeric: "m" }, second: { "2-digit": "ss", numeric: "s" },
    timeZoneName: { short: "z", long: "zzzz", shortOffset: "O", longOffset: "OOOO", shortGeneric: "v", longGeneric: "vvvv" } };
  const OWNER_DTF = "Intl.DateTimeFormat";
  // ECMA-402 CreateDateTimeFormat; `required`/`defaults` come from the
  // toLocale*String method that asked ("any"/"all" for the constructor).
  const createDTF = (obj, locales, options, required, defaults) => {
    const [tag, dataTag] = resolveLocale(locales);
    const opts = toOptions(options);
    getOption(opts, "localeMatcher", ["lookup", "best fit"], "best fit", OWNER_DTF);
    const hour12 = getOption(opts, "hour12", "boolean");
    let hourCycle = getOption(opts, "hourCycle", ["h11", "h12", "h23", "h24"], undefined, OWNER_DTF);
    if (hour12 !== undefined) hourCycle = undefined;
    let timeZone = opts.timeZone;
    if (timeZone === undefined) timeZone = "UTC";
    else {
      // V8's spelling first ("america/new_york" -> "America/New_York"),
      // then the name as given, for hosts that know other spellings.
      const given = String(timeZone), valid = (z) => { try { offsetAt(z, 0); return true; } catch (e) { return false; } };
      timeZone = valid(canonicalZone(given)) ? canonicalZone(given) : valid(given) ? given : undefined;
      if (timeZone === undefined) throw new RangeError("Invalid time zone specified: " + given);
    }
    const o = {};
    for (const [name, values] of DATE_FIELDS) {
      o[name] = name === "fractionalSecondDigits" ? getNumberOption(opts, name, 1, 3, undefined) : getOption(opts, name, values, undefined, OWNER_DTF);
    }
    getOption(opts, "formatMatcher", ["basic", "best fit"], "best fit", OWNER_DTF);
    const dateStyle = getOption(opts, "dateStyle", STYLES, undefined, OWNER_DTF);
    const timeStyle = getOption(opts, "timeStyle", STYLES, undefined, OWNER_DTF);
    const loc = localeData(dataTag);
    const hcDefault = loc.hourChar === "h" ? "h12" : "h23";
    let hc = hourCycle || hcDefault;
    if (hour12 !== undefined) hc = hour12 ? (hcDefault === "h23" ? "h11" : "h12") : hcDefault === "h23" ? "h23" : "h24";
    let pattern;
    if (dateStyle !== undefined || timeStyle !== undefined) {
      // (V8 names the first such field, fractionalSecondDigits last.)
      const bad = DATE_FIELDS.map((f) => f[0]).filter((name) => o[name] !== undefined).sort((a, b) => (a[0] === "f") - (b[0] === "f"))[0];
      if (bad) throw new TypeError("Can't set option " + bad + " when " + (dateStyle !== undefined ? "dateStyle" : "timeStyle") + " is used");
      if (required === "date" && timeStyle !== undefined) throw new TypeError("Invalid option : timeStyle");
      if (required === "time" && dateStyle !== undefined) throw new TypeError("Invalid option : dateStyle");
      pattern = stylePattern(loc, dateStyle, timeStyle, hc);
      hc = hourCycleOf(pattern);
    } else {
      let needDefaults = true;
      if (required !== "time" && (o.weekday || o.year || o.month || o.day)) needDefaults = false;
      if (required !== "date" && (o.dayPeriod || o.hour || o.minute || o.second || o.fractionalSecondDigits)) needDefaults = false;
      if (needDefaults && defaults !== "time") o.year = o.month = o.day = "numeric";
      if (needDefaults && defaults !== "date") o.hour = o.minute = o.second = "numeric";
      let sk = "";
      for (const name in SKELETON) if (o[name]) sk += SKELETON[name][o[name]];
      if (o.hour) sk += HC_CHAR[hc].repeat(o.hour === "2-digit" ? 2 : 1);
      if (o.fractionalSecondDigits) sk += "S".repeat(o.fractionalSecondDigits);
      pattern = bestPattern(loc, sk);
      // (V8 reports the hour cycle whenever an hour was asked for, even
      // where ICU's pattern lost it.)
      if (o.hour) pattern = withHourCycle(pattern, hc); else hc = undefined;
    }
    DTF_STATE.set(obj, { tag, loc, zone: timeZone, timeZone: ZONE_ALIASES[timeZone] || timeZone, pattern, tokens: lex(pattern), hc, dateStyle, timeStyle });
    return obj;
  };
  const dtfState = (x, method) => {
    const st = typeof x === "object" && x !== null ? DTF_STATE.get(x) : undefined;
    if (!st) throw new TypeError("Method Intl.DateTimeFormat.prototype." + method + " called on incompatible receiver " + String(x));
    return st;
  };
  const DateTimeFormat = function DateTimeFormat(locales, options) {
    if (new.target === undefined) return new DateTimeFormat(locales, options);
    return createDTF(this, locales, options, "any", "date");
  };
  const dtfProto = DateTimeFormat.prototype;
  // V8 reads resolved field styles back by searching the pattern text for
  // these substrings, in this order (quoted text included: "HH'h'" gives
  // hour "numeric" for h24, "(day: d)" gives a year, "Sekunde" a fraction).
  const RESOLVED = [["weekday", "EEEEE narrow EEEE long EEE short ccccc narrow cccc long ccc short"], ["year", "yy 2-digit y numeric"],
    ["month", "MMMMM narrow MMMM long MMM short MM 2-digit M numeric LLLLL narrow LLLL long LLL short LL 2-digit L numeric"],
    ["day", "dd 2-digit d numeric"], ["hour", "HH 2-digit H numeric hh 2-digit h numeric kk 2-digit k numeric KK 2-digit K numeric"],
    ["minute", "mm 2-digit m numeric"], ["second", "ss 2-digit s numeric"],
    ["timeZoneName", "zzzz long z short OOOO longOffset O shortOffset vvvv longGeneric v shortGeneric"]];
  const methods = (proto, defs) => {
    for (const name in defs) defineProperty(proto, name, { value: defs[name], writable: true, enumerable: false, configurable: true });
  };
  methods(dtfProto, {
    formatToParts(date) { const st = dtfState(this, "formatToParts"); return formatDateParts(st, date === undefined ? dateNow() : timeClip(date)); },
    formatRange(a, b) {
      const st = dtfState(this, "formatRange");
      if (a === undefined || b === undefined) throw new TypeError("Invalid time value");
      const x = joinParts(formatDateParts(st, timeClip(a))), y = joinParts(formatDateParts(st, timeClip(b)));
      return x === y ? x : x + "\u2009\u2013\u2009" + y;
    },
    resolvedOptions() {
      const st = dtfState(this, "resolvedOptions");
      const r = { locale: st.tag, calendar: "gregory", numberingSystem: "latn", timeZone: st.timeZone };
      if (st.hc) { r.hourCycle = st.hc; r.hour12 = st.hc === "h11" || st.hc === "h12"; }
      if (st.dateStyle || st.timeStyle) {
        if (st.dateStyle) r.dateStyle = st.dateStyle;
        if (st.timeStyle) r.timeStyle = st.timeStyle;
        return r;
      }
      const found = {};
      for (const [name, pairs] of RESOLVED) {
        const w = pairs.split(" ");
        for (let i = 0; i < w.length; i += 2) if (st.pattern.includes(w[i])) { found[name] = w[i + 1]; break; }
      }
      const s = Math.min(st.pattern.split("S").length - 1, 3); // V8 counts every "S", up to 3
      if (s) found.fractionalSecondDigits = s;
      for (const [name] of DATE_FIELDS) if (found[name] !== undefined) r[name] = found[name];
      return r;
    },
  });
  defineProperty(dtfProto, "format", { get() {
    const st = dtfState(this, "format");
    if (!st.bound) st.bound = (date) => joinParts(formatDateParts(st, date === undefined ? dateNow() : timeClip(date))).replace(/\u202f/g, " ");
    return st.bound;
  }, enumerable: false, configurable: true });

  // --------------------------------------------------- number formatting
  // A decimal is {neg, d, p}: digits d (no leading or trailing zeros) with
  // the point after p of them; 1234.5 is {d: "12345", p: 4}, 0 is {d: ""}.
  const decimal = (x) => {
    if (typeof x === "bigint") { const s = String(x); const neg = s[0] === "-"; return norm({ neg, d: neg ? s.slice(1) : s, p: s.length - (neg ? 1 : 0) }); }
    const neg = x < 0 || (x === 0 && 1 / x < 0);
    const m = /^(\d+)(?:\.(\d+))?(?:e([+-]\d+))?$/.exec(String(abs(x)));
    return norm({ neg, d: m[1] + (m[2] || ""), p: m[1].length + (m[3] ? Number(m[3]) : 0) });
  };
  const norm = (v) => {
    let i = 0; while (i < v.d.length && v.d[i] === "0") i++;
    let j = v.d.length; while (j > i && v.d[j - 1] === "0") j--;
    return { neg: v.neg, d: v.d.slice(i, j), p: i === j ? 0 : v.p - i };
  };
  const magnitude = (v) => (v.d ? v.p - 1 : 0);
  // Keeps `k` leading digits, rounding by `mode` (ECMA-402's names).
  const roundDigits = (v, k, mode) => {
    let d = v.d, p = v.p;
    if (k >= d.length) return v;
    if (k < 1) { d = "0".repeat(1 - k) + d; p += 1 - k; k = 1; }
    const first = d.charCodeAt(k) - 48, rest = /[1-9]/.test(d.slice(k + 1)), any = first > 0 || rest;
    const half = first > 5 || (first === 5 && rest) ? 1 : first === 5 ? 0 : -1;
    const odd = (d.charCodeAt(k - 1) - 48) % 2 === 1;
    const up = { ceil: any && !v.neg, floor: any && v.neg, expand: any, trunc: false, halfCeil: half > 0 || (half === 0 && !v.neg),
      halfFloor: half > 0 || (half === 0 && v.neg), halfExpand: half >= 0, halfTrunc: half > 0, halfEven: half > 0 || (half === 0 && odd) }[mode];
    d = d.slice(0, k);
    if (up) {
      let i = d.length - 1;
      while (i >= 0 && d[i] === "9") i--;
      d = i < 0 ? "1" + "0".repeat(d.length) : d.slice(0, i) + String.fromCharCode(d.charCodeAt(i) + 1) + "0".repeat(d.length - 1 - i);
      if (i < 0) p++;
    }
    return norm({ neg: v.neg, d, p });
  };
  // ECMA-402 FormatNumericToString's rounding: fraction digits, significant
  // digits, or whichever of the two keeps more (or less) precision.
  const round = (st, v) => {
    const frac = () => ({ v: roundDigits(v, v.p + st.maxFD, st.roundingMode), mag: -st.maxFD, min: st.minFD, sig: false });
    const sig = () => { const r = roundDigits(v, st.maxSD, st.roundingMode); return { v: r, mag: magnitude(r) - st.maxSD + 1, min: st.minSD, sig: true }; };
    if (st.roundingType === "fraction") return frac();
    if (st.roundingType === "significant") return sig();
    const s = sig(), f = frac();
    return (st.roundingType === "morePrecision") === (s.mag <= f.mag) ? s : f;
  };
  const groupDigits = (int, mode) => {
    if (!mode || int.length < (mode === "min2" ? 5 : 4)) return [int];
    const out = [];
    for (let i = int.length; i > 0; i -= 3) out.unshift(int.slice(Math.max(0, i - 3), i));
    return out;
  };
  // Integer, group, decimal and fraction parts of a rounded decimal.
  const digitParts = (st, r, parts) => {
    const v = r.v;
    let int = v.p > 0 ? v.d.slice(0, v.p).padEnd(v.p, "0") : "";
    let fr = v.p >= 0 ? v.d.slice(v.p) : "0".repeat(-v.p) + v.d;
    int = int.padStart(st.minInt, "0");
    if (r.sig) {
      // Significant digits shown so far: all integer digits, or all digits.
      const shown = !v.d ? 1 : v.p >= v.d.length ? v.p : v.d.length;
      if (shown < r.min) fr = fr.padEnd(fr.length + r.min - shown, "0");
    } else fr = fr.padEnd(r.min, "0");
    if (st.trailingZeroDisplay === "stripIfInteger" && /^0*$/.test(fr)) fr = "";
    const groups = groupDigits(int, st.useGrouping === "auto" && st.notation === "compact" ? "min2" : st.useGrouping);
    groups.forEach((gr, i) => { if (i) parts.push({ type: "group", value: st.loc.num.grp }); parts.push({ type: "integer", value: gr }); });
    if (fr) parts.push({ type: "decimal", value: st.loc.num.dec }, { type: "fraction", value: fr });
    return { int, fr };
  };
  const isZero = (r) => !r.v.d;
  // CLDR plural category "one" of the digits shown (en, de: "1"; fr: 0 or 1 and any fraction).
  // (ICU reads the integer operand as its last 18 digits.)
  const pluralOne = (lang, shown) => { const i = shown.int.slice(-18).replace(/^0+(?=\d)/, ""); return lang === "fr" ? i === "0" || i === "1" : i === "1" && !shown.fr; };
  const formatNumberParts = (st, x) => {
    const num = st.loc.num, parts = [];
    let v, neg, special;
    if (typeof x !== "bigint" && x !== x) { special = { type: "nan", value: "NaN" }; neg = false; }
    else if (typeof x !== "bigint" && (x === Infinity || x === -Infinity)) { special = { type: "infinity", value: "∞" }; neg = x < 0; }
    else { v = decimal(x); neg = v.neg; if (st.style === "percent") v = norm({ neg, d: v.d, p: v.p + 2 }); }
    let r, forms, shift = 0, exponent;
    if (!special) {
      if (st.notation === "compact") {
        // ICU picks the magnitude, rounds, and re-picks when rounding
        // carried into the next power of ten (999999 -> "1M").
        // (No long forms for currency symbols; names take the decimal ones.)
        forms = (st.compactDisplay === "long" && (st.style !== "currency" || st.currencyDisplay === "name") ? num.long : num.short).split("|");
        const shiftFor = (m) => (m < 3 || !forms[Math.min(floor(m / 3), 4) - 1] ? 0 : Math.min(floor(m / 3), 4) * 3);
        shift = shiftFor(magnitude(v));
        r = round(st, { neg, d: v.d, p: v.p - shift });
        if (!isZero(r) && magnitude(r.v) + shift !== magnitude(v) && shiftFor(magnitude(v) + 1) !== shift) {
          shift = shiftFor(magnitude(v) + 1); r = round(st, { neg, d: v.d, p: v.p - shift });
        }
      } else if (st.notation === "scientific" || st.notation === "engineering") {
        const step = st.notation === "engineering" ? 3 : 1;
        let e = v.d ? floor(magnitude(v) / step) * step : 0;
        r = round(st, { neg, d: v.d, p: v.p - e });
        if (magnitude(r.v) >= step) { e += step; r = round(st, { neg, d: v.d, p: v.p - e }); }
        exponent = e;
      } else r = round(st, v);
    }
    const zero = special ? special.type === "nan" : isZero(r);
    const sd = st.signDisplay;
    const sign = sd === "never" ? "" : neg && sd !== "exceptZero" && sd !== "negative" ? "-"
      : neg && !zero ? "-" : !neg && (sd === "always" || (sd === "exceptZero" && !zero)) ? "+" : "";
    // (Compact currency patterns and currency names have no accounting
    // form; uncompacted numbers use the standard one.)
    const paren = sign === "-" && st.currencySign === "accounting" && st.style === "currency" && st.currencyDisplay !== "name" && !shift && num.acc;
    if (paren) parts.push({ type: "literal", value: "(" });
    else if (sign) parts.push({ type: sign === "-" ? "minusSign" : "plusSign", value: sign });
    const cur = st.style === "currency" && st.currencyDisplay !== "name" ? st.symbol : "";
    if (cur && num.cur === "prefix") {
      parts.push({ type: "currency", value: cur });
      // CLDR currency spacing: a letter next to a digit gets a no-break space.
      if (!special && /[^$€£¥₹₩₪₫₱\u20a0-\u20cf]$/.test(cur)) parts.push({ type: "literal", value: "\u00a0" });
    }
    const digits = [], shown = special ? { int: "", fr: "" } : digitParts(st, r, digits);
    const compact = shift ? forms[shift / 3 - 1].split("/") : [];
    if (compact[2] && !neg && shown.int === "1" && !shown.fr) compact.splice(0, 2, compact[2]);
    else parts.push(...(special ? [special] : digits));
    if (exponent !== undefined) {
      parts.push({ type: "exponentSeparator", value: "E" });
      if (exponent < 0) parts.push({ type: "exponentMinusSign", value: "-" });
      parts.push({ type: "exponentInteger", value: String(abs(exponent)) });
    }
    if (shift) {
      const m = /^([ \u00a0]?)(.*)$/.exec(compact.length > 1 && !pluralOne(st.loc.lang, shown) ? compact[1] : compact[0]);
      if (m[1]) parts.push({ type: "literal", value: m[1] });
      parts.push({ type: "compact", value: m[2] });
    }
    if (st.style === "percent") {
      // (ICU formats compact percents as a unit: a plain space where "50 %"
      // has U+00A0, and a "unit" part.)
      const compactPct = st.notation === "compact";
      if (num.pct.length > 1) parts.push({ type: "literal", value: compactPct ? " " : num.pct[0] });
      parts.push({ type: compactPct ? "unit" : "percentSign", value: "%" });
    }
    if (cur && num.cur === "suffix") parts.push({ type: "literal", value: "\u00a0" }, { type: "currency", value: cur });
    if (st.style === "currency" && st.currencyDisplay === "name") {
      // The plural of the whole amount ("1K US dollars"), not of the digits
      // shown; French says "many" (here: other) for exponents outside 0..5.
      const names = (table(CURRENCY_NAMES[st.loc.lang])[st.currency] || st.currency).split("/");
      const p = special ? 0 : r.v.p + (shift || exponent || 0), whole = special || !r.v.d || p <= 0 ? "0" : r.v.d.slice(0, p).padEnd(p, "0");
      const many = st.loc.lang === "fr" && (exponent < 0 || exponent > 5);
      parts.push({ type: "literal", value: " " }, { type: "currency", value: names[!special && !many && pluralOne(st.loc.lang, { int: whole, fr: shown.fr }) ? 0 : names.length - 1] });
    }
    if (paren) parts.push({ type: "literal", value: ")" });
    return parts;
  };

  // ------------------------------------------------------- NumberFormat
  const NF_STATE = new WeakMap();
  const OWNER_NF = "Intl.NumberFormat";
  const createNF = (obj, locales, options) => {
    const [tag, dataTag] = resolveLocale(locales);
    const opts = toOptions(options);
    getOption(opts, "localeMatcher", ["lookup", "best fit"], "best fit", OWNER_NF);
    const st = { tag, loc: localeData(dataTag) };
    st.style = getOption(opts, "style", ["decimal", "percent", "currency", "unit"], "decimal", OWNER_NF);
    let currency = getOption(opts, "currency", undefined, undefined, OWNER_NF);
    if (currency !== undefined && !/^[A-Za-z]{3}$/.test(currency)) throw new RangeError("Invalid currency code : " + currency);
    const currencyDisplay = getOption(opts, "currencyDisplay", ["code", "symbol", "narrowSymbol", "name"], "symbol", OWNER_NF);
    const currencySign = getOption(opts, "currencySign", ["standard", "accounting"], "standard", OWNER_NF);
    if (st.style === "unit") throw new RangeError("Intl.NumberFormat style \"unit\" is not supported here");
    if (st.style === "currency") {
      if (currency === undefined) throw new TypeError("Currency code is required with currency style.");
      currency = currency.toUpperCase();
      Object.assign(st, { currency, currencyDisplay, currencySign });
      st.symbol = currencyDisplay === "code" ? currency : (currencyDisplay === "narrowSymbol" && table(NARROW)[currency]) || st.loc.currencies[currency] || currency;
    }
    st.notation = getOption(opts, "notation", ["standard", "scientific", "engineering", "compact"], "standard", OWNER_NF);
    // SetNumberFormatDigitOptions.
    const cd = st.style !== "currency" ? 2 : DIGITS0.includes(" " + currency + " ") ? 0 : DIGITS3.includes(" " + currency + " ") ? 3 : DIGITS4.includes(" " + currency + " ") ? 4 : 2;
    const mnfdDefault = st.style === "currency" ? cd : 0, mxfdDefault = st.style === "currency" ? cd : st.style === "percent" ? 0 : 3;
    st.minInt = getNumberOption(opts, "minimumIntegerDigits", 1, 21, 1);
    const mnfd = opts.minimumFractionDigits, mxfd = opts.maximumFractionDigits, mnsd = opts.minimumSignificantDigits, mxsd = opts.maximumSignificantDigits;
    const increment = getNumberOption(opts, "roundingIncrement", 1, 5000, 1);
    if (increment !== 1) throw new RangeError("roundingIncrement value is out of range.");
    st.roundingMode = getOption(opts, "roundingMode", ["ceil", "floor", "expand", "trunc", "halfCeil", "halfFloor", "halfExpand", "halfTrunc", "halfEven"], "halfExpand", OWNER_NF);
    const priority = getOption(opts, "roundingPriority", ["auto", "morePrecision", "lessPrecision"], "auto", OWNER_NF);
    st.trailingZeroDisplay = getOption(opts, "trailingZeroDisplay", ["auto", "stripIfInteger"], "auto", OWNER_NF);
    const hasSd = mnsd !== undefined || mxsd !== undefined, hasFd = mnfd !== undefined || mxfd !== undefined;
    let needSd = true, needFd = true;
    if (priority === "auto") { needSd = hasSd; if (needSd || (!hasFd && st.notation === "compact")) needFd = false; }
    const num = (v, min, max, fb, name) => { if (v === undefined) return fb; v = Number(v); if (v !== v || v < min || v > max) throw new RangeError(name + " value is out of range."); return floor(v); };
    if (needSd) {
      st.minSD = hasSd ? num(mnsd, 1, 21, 1, "minimumSignificantDigits") : 1;
      st.maxSD = hasSd ? num(mxsd, st.minSD, 21, 21, "maximumSignificantDigits") : 21;
    }
    if (needFd) {
      if (hasFd) {
        let lo = num(mnfd, 0, 100, undefined, "minimumFractionDigits"), hi = num(mxfd, 0, 100, undefined, "maximumFractionDigits");
        if (lo === undefined) lo = Math.min(mnfdDefault, hi);
        else if (hi === undefined) hi = Math.max(mxfdDefault, lo);
        else if (lo > hi) throw new RangeError("maximumFractionDigits value is out of range.");
        st.minFD = lo; st.maxFD = hi;
      } else { st.minFD = mnfdDefault; st.maxFD = mxfdDefault; }
    }
    if (!needSd && !needFd) { Object.assign(st, { minFD: 0, maxFD: 0, minSD: 1, maxSD: 2, roundingType: "morePrecision" }); st.priority = "morePrecision"; }
    else { st.roundingType = priority === "auto" ? (needSd ? "significant" : "fraction") : priority; st.priority = priority; }
    st.compactDisplay = getOption(opts, "compactDisplay", ["short", "long"], "short", OWNER_NF);
    const grouping = opts.useGrouping;
    const gDefault = st.notation === "compact" ? "min2" : "auto";
    st.useGrouping = grouping === undefined ? gDefault : grouping === true ? "always" : !grouping ? false
      : ["min2", "auto", "always"].includes(String(grouping)) ? String(grouping) : String(grouping) === "true" || String(grouping) === "false" ? gDefault
      : (() => { throw new RangeError("Value " + String(grouping) + " out of range for Intl.NumberFormat options property useGrouping"); })();
    st.signDisplay = getOption(opts, "signDisplay", ["auto", "never", "always", "exceptZero", "negative"], "auto", OWNER_NF);
    NF_STATE.set(obj, st);
    return obj;
  };
  const nfState = (x, method) => {
    const st = typeof x === "object" && x !== null ? NF_STATE.get(x) : undefined;
    if (!st) throw new TypeError("Method Intl.NumberFormat.prototype." + method + " called on incompatible receiver " + String(x));
    return st;
  };
  const toNumeric = (x) => (typeof x === "bigint" ? x : Number(x));
  const NumberFormat = function NumberFormat(locales, options) {
    if (new.target === undefined) return new NumberFormat(locales, options);
    return createNF(this, locales, options);
  };
  const nfProto = NumberFormat.prototype;
  methods(nfProto, {
    formatToParts(x) { return formatNumberParts(nfState(this, "formatToParts"), toNumeric(x)); },
    resolvedOptions() {
      const st = nfState(this, "resolvedOptions");
      const r = { locale: st.tag, numberingSystem: "latn", style: st.style };
      if (st.style === "currency") Object.assign(r, { currency: st.currency, currencyDisplay: st.currencyDisplay, currencySign: st.currencySign });
      r.minimumIntegerDigits = st.minInt;
      if (st.minSD !== undefined) { r.minimumSignificantDigits = st.minSD; r.maximumSignificantDigits = st.maxSD; }
      if (st.minFD !== undefined) { r.minimumFractionDigits = st.minFD; r.maximumFractionDigits = st.maxFD; }
      r.useGrouping = st.useGrouping; r.notation = st.notation;
      if (st.notation === "compact") r.compactDisplay = st.compactDisplay;
      Object.assign(r, { signDisplay: st.signDisplay, roundingMode: st.roundingMode, roundingIncrement: 1, trailingZeroDisplay: st.trailingZeroDisplay, roundingPriority: st.priority });
      return r;
    },
  });
  defineProperty(nfProto, "format", { get() {
    const st = nfState(this, "format");
    if (!st.bound) st.bound = (x) => joinParts(formatNumberParts(st, toNumeric(x)));
    return st.bound;
  }, enumerable: false, configurable: true });

  // ------------------------------------------------------------ install
  const supportedLocalesOf = function supportedLocalesOf(locales) { return canonicalList(locales).filter(supportedTag); };
  for (const [C, name] of [[DateTimeFormat, "DateTimeFormat"], [NumberFormat, "NumberFormat"]]) {
    methods(C, { supportedLocalesOf });
    defineProperty(C, "prototype", { writable: false });
    defineProperty(C.prototype, g.Symbol.toStringTag, { value: "Intl." + name, configurable: true });
    defineProperty(C, "length", { value: 0 });
  }
  const Intl = {};
  methods(Intl, { DateTimeFormat, NumberFormat, getCanonicalLocales(locales) { return canonicalList(locales); } });
  defineProperty(Intl, g.Symbol.toStringTag, { value: "Intl", configurable: true });
  defineProperty(g, "Intl", { value: freeze(Intl), writable: false, enumerable: false, configurable: false });

  // toLocale*String: the date defaults of each method (ECMA-402 ToDateTimeOptions).
  const timeValue = (d) => apply(getTime, d, []);
  const dateMethod = (name, required, defaults) => ({ [name](locales, options) {
    const t = timeValue(this);
    if (t !== t) return "Invalid Date";
    const st = DTF_STATE.get(createDTF({}, locales, options, required, defaults));
    return joinParts(formatDateParts(st, t)).replace(/\u202f/g, " ");
  } })[name];
  methods(DateProto, { toLocaleString: dateMethod("toLocaleString", "any", "all"),
    toLocaleDateString: dateMethod("toLocaleDateString", "date", "date"), toLocaleTimeString: dateMethod("toLocaleTimeString", "time", "time") });
  methods(g.Number.prototype, { toLocaleString(locales, options) {
    return joinParts(formatNumberParts(NF_STATE.get(createNF({}, locales, options)), apply(numberValueOf, this, [])));
  } });
  // ECMA-402's Array.prototype.toLocaleString passes locales and options on.
  methods(g.Array.prototype, { toLocaleString(locales, options) {
    const a = Object(this), n = Math.min(Math.max(floor(Number(a.length)) || 0, 0), 2 ** 53 - 1);
    let out = "";
    for (let i = 0; i < n; i++) {
      const e = a[i];
      out += (i ? "," : "") + (e === undefined || e === null ? "" : String(e.toLocaleString(locales, options)));
    }
    return out;
  } });
  if (BigIntProto) methods(BigIntProto, { toLocaleString(locales, options) {
    return joinParts(formatNumberParts(NF_STATE.get(createNF({}, locales, options)), apply(bigintValueOf, this, [])));
  } });
}
