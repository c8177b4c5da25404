// The page of `albert export --format web`: the exported ALBERT in this tab, with transformers.js and
// ONNX Runtime Web from ./lib/ and the model from this folder (nothing is fetched from anywhere else).
//
// albert-web.json (written by the export) says the task, the labels, the token ids the inputs are built
// from and the files. The inputs are built here as albert-lm builds them in Python: [CLS] text [SEP]
// (text pair: [CLS] a [SEP] b [SEP], types 0 then 1), truncated to the trained length, [MASK] put between
// the encoded parts of a fill-mask text; so the page computes what `albert predict`, `albert fill-mask`
// and `albert embed` compute. Each result is shown and kept, machine-readable, in window.albertResult
// and #result: the ids, the raw outputs (logits, vectors), the probabilities and the timings.

const page = {
  manifest: null,
  tokenizer: null,
  model: null,
  dtype: null,
  timings: { load_ms: null, first_ms: null, later_ms: [] },
  ready: false, // set up: the model loaded, the button enabled
  asked: false, // the form was submitted before then: predict once ready
};
window.albertResult = null;
window.albertError = null;

const $ = (id) => document.getElementById(id);
const ms = (x) => (x === null ? "\u2013" : `${x.toFixed(x < 100 ? 1 : 0)} ms`);

function fail(error) {
  const message = error && error.message ? error.message : String(error);
  window.albertError = message;
  $("error").textContent = message;
  $("error").hidden = false;
  document.body.dataset.state = "error";
  console.error(error);
}

async function load() {
  const manifest = await (await fetch("albert-web.json")).json();
  page.manifest = manifest;
  const lib = await import(new URL(manifest.library, location.href).href);
  const { env } = lib;
  env.allowRemoteModels = false; // the model is this folder's; nothing from the hub
  env.allowLocalModels = true;
  env.localModelPath = new URL(".", location.href).pathname; // this page's own folder
  env.useBrowserCache = false; // a re-exported model at the same address is read afresh
  const onnx = env.backends.onnx;
  onnx.wasm.wasmPaths = {
    mjs: new URL(manifest.wasm.mjs, location.href).href,
    wasm: new URL(manifest.wasm.wasm, location.href).href,
  };
  // Threads need a cross-origin isolated page (COOP/COEP headers); a plain static server runs one.
  onnx.wasm.numThreads = self.crossOriginIsolated ? Math.min(4, navigator.hardwareConcurrency || 1) : 1;
  const wanted = new URLSearchParams(location.search).get("dtype");
  page.dtype = wanted && manifest.files[wanted] ? wanted : manifest.default_dtype;
  const Model = { "text-classification": lib.AutoModelForSequenceClassification,
    "fill-mask": lib.AutoModelForMaskedLM, "feature-extraction": lib.AutoModel }[manifest.task];
  // "." is this folder: the files are read as ./config.json, ./onnx/model*.onnx, ./tokenizer.json
  const options = { dtype: page.dtype, device: "wasm", local_files_only: true };
  [page.tokenizer, page.model] = await Promise.all([
    lib.AutoTokenizer.from_pretrained(".", { local_files_only: true }),
    Model.from_pretrained(".", options),
  ]);
  page.Tensor = lib.Tensor;
  page.timings.load_ms = performance.now(); // since the page was opened: library, runtime and model
}

function encodeText(text) {
  return Array.from(page.tokenizer.encode(text, { add_special_tokens: false }));
}

function build(a, b) {
  // [CLS] a [SEP] (b [SEP]): one text keeps its first max_length - 2 tokens; a pair drops tokens from
  // the end of the longer one first, the first on a tie (BERT's longest-first truncation).
  const { cls, sep } = page.manifest.special_ids;
  const room = page.manifest.max_length - (b ? 3 : 2);
  a = a.slice();
  if (b) {
    b = b.slice();
    while (a.length + b.length > room) (b.length > a.length ? b : a).pop(); // a on a tie
  } else {
    a = a.slice(0, room);
  }
  const ids = [cls, ...a, sep, ...(b ? [...b, sep] : [])];
  const types = ids.map((_, i) => (i < a.length + 2 ? 0 : 1));
  return { ids, types };
}

function tensor(values) {
  return new page.Tensor("int64", BigInt64Array.from(values, (v) => BigInt(v)), [1, values.length]);
}

async function run(ids, types) {
  const inputs = {
    input_ids: tensor(ids),
    attention_mask: tensor(ids.map(() => 1)),
    token_type_ids: tensor(types || ids.map(() => 0)),
  };
  return page.model(inputs);
}

function softmax(xs) {
  const top = Math.max(...xs);
  const e = xs.map((x) => Math.exp(x - top));
  const sum = e.reduce((s, x) => s + x, 0);
  return e.map((x) => x / sum);
}

async function classify(text, text2) {
  const m = page.manifest;
  // A model of pairs never scores a text alone (albert predict refuses such a row too).
  if (m.pair && !text2.trim()) throw new Error("This model reads pairs of texts: give the second text too.");
  const { ids, types } = build(encodeText(text), m.pair ? encodeText(text2) : null);
  const logits = Array.from((await run(ids, types)).logits.data);
  const result = { input_ids: ids, logits };
  if (m.problem_type === "regression" || !m.labels.length) {
    result.score = logits[0];
    return result;
  }
  const multi = m.problem_type === "multi_label_classification";
  const p = multi ? logits.map((x) => 1 / (1 + Math.exp(-x))) : softmax(logits);
  result.probabilities = Object.fromEntries(m.labels.map((name, i) => [name, p[i]]));
  result.label = m.labels[p.indexOf(Math.max(...p))];
  if (multi) result.labels = m.labels.filter((_, i) => p[i] >= 0.5);
  return result;
}

async function fillMask(text) {
  const m = page.manifest;
  const { cls, sep, mask } = m.special_ids;
  const parts = text.split("[MASK]");
  if (parts.length === 1) throw new Error("no [MASK] in the text: write [MASK] where a word is missing");
  let ids = [cls];
  const positions = [];
  parts.forEach((part, k) => {
    if (k) {
      positions.push(ids.length);
      ids.push(mask);
    }
    ids.push(...(part ? encodeText(part) : []));
  });
  const limit = m.max_length - 1;
  if (positions[positions.length - 1] >= limit) {
    throw new Error(`[MASK] number ${positions.length} is past the model's ${m.max_length} tokens`);
  }
  ids = [...ids.slice(0, limit), sep];
  const logits = (await run(ids)).logits; // (1, tokens, vocabulary)
  const vocab = logits.dims[2];
  const masks = positions.map((at) => {
    const row = Array.from(logits.data.subarray(at * vocab, (at + 1) * vocab));
    const p = softmax(row);
    const order = p.map((v, i) => [v, i]).sort((x, y) => y[0] - x[0]).slice(0, m.top_k);
    return {
      logits: row,
      top: order.map(([prob, id]) => ({ id, token: pieceText(id), probability: prob })),
    };
  });
  const filled = parts[0] + parts.slice(1).map((rest, k) => masks[k].top[0].token + rest).join("");
  return { input_ids: ids, masks, filled };
}

function pieceText(id) {
  // as albert fill-mask names a piece: its text without the word-start mark
  const piece = page.tokenizer.decode([id]);
  return piece.replaceAll("\u2581", " ").trim() || piece;
}

async function embedOne(text) {
  const { ids } = build(encodeText(text), null);
  const hidden = (await run(ids)).last_hidden_state; // (1, tokens, hidden)
  const [, n, width] = hidden.dims;
  const vector = new Array(width).fill(0);
  for (let t = 0; t < n; t++) for (let j = 0; j < width; j++) vector[j] += hidden.data[t * width + j];
  return { input_ids: ids, vector: vector.map((v) => v / n) };
}

const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));

async function embed(text, text2) {
  const first = await embedOne(text);
  const result = { input_ids: [first.input_ids], vectors: [first.vector], norms: [norm(first.vector)] };
  if (text2) {
    const second = await embedOne(text2);
    result.input_ids.push(second.input_ids);
    result.vectors.push(second.vector);
    result.norms.push(norm(second.vector));
    const dot = first.vector.reduce((s, x, i) => s + x * second.vector[i], 0);
    result.cosine = dot / (result.norms[0] * result.norms[1] || 1e-12);
  }
  return result;
}

const TASKS = { "text-classification": classify, "fill-mask": fillMask, "feature-extraction": embed };

function bar(name, value, shown) {
  const row = document.createElement("div");
  row.className = "bar";
  const label = document.createElement("span");
  label.textContent = name;
  const fill = document.createElement("div");
  fill.className = "fill";
  fill.style.width = `${Math.max(0, Math.min(1, value)) * 100}%`;
  const number = document.createElement("span");
  number.className = "value";
  number.textContent = shown;
  row.append(label, fill, number);
  return row;
}

function line(text, className) {
  const p = document.createElement("p");
  p.textContent = text;
  if (className) p.className = className;
  return p;
}

function show(result) {
  const out = $("prediction");
  out.replaceChildren();
  const pct = (p) => `${(100 * p).toFixed(1)}%`;
  if (result.probabilities) {
    out.append(line(result.label, "big"));
    for (const [name, p] of Object.entries(result.probabilities)) out.append(bar(name, p, pct(p)));
  } else if (result.score !== undefined) {
    out.append(line(`score ${result.score.toFixed(4)}`, "big"));
  } else if (result.masks) {
    out.append(line(result.filled, "big"));
    result.masks.forEach((m, k) => {
      if (result.masks.length > 1) out.append(line(`[MASK] ${k + 1}`));
      for (const c of m.top) out.append(bar(c.token, c.probability, pct(c.probability)));
    });
  } else if (result.vectors) {
    const width = result.vectors[0].length;
    out.append(line(`${width} dimensions; norm ${result.norms.map((n) => n.toFixed(4)).join(" and ")}`));
    if (result.cosine !== undefined) out.append(line(`cosine similarity ${result.cosine.toFixed(4)}`, "big"));
  }
}

function showTimings() {
  const t = page.timings;
  $("t-load").textContent = ms(t.load_ms);
  $("t-first").textContent = ms(t.first_ms);
  const later = t.later_ms;
  $("t-later").textContent = later.length ? `${ms(later[later.length - 1])} / ${ms(median(later))}` : "\u2013";
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const h = Math.floor(s.length / 2);
  return s.length % 2 ? s[h] : (s[h - 1] + s[h]) / 2;
}

async function predict(event) {
  if (event) event.preventDefault();
  if (!page.ready) {
    // The button is disabled until the model has loaded, but a form submitted before then (a script's
    // requestSubmit) is kept for then rather than sent: sent, it would reload the page and lose the text.
    page.asked = true;
    return;
  }
  document.body.dataset.state = "running";
  $("error").hidden = true;
  const m = page.manifest;
  const text = $("text").value;
  const text2 = $("second").hidden ? "" : $("text2").value;
  try {
    const start = performance.now();
    const result = await TASKS[m.task](text, text2);
    const took = performance.now() - start;
    const t = page.timings;
    if (t.first_ms === null) t.first_ms = took;
    else t.later_ms.push(took);
    Object.assign(result, { task: m.task, dtype: page.dtype, ms: took, timings: { ...t,
      later_median_ms: t.later_ms.length ? median(t.later_ms) : null } });
    window.albertResult = result;
    $("result").textContent = JSON.stringify(result, null, 1);
    show(result);
    showTimings();
    document.body.dataset.state = "done";
  } catch (error) {
    fail(error);
  }
}

function setUp() {
  const m = page.manifest;
  $("title").textContent = m.title;
  $("about").textContent = m.about;
  offer("text", m.example);
  if (m.task === "feature-extraction" || m.pair) {
    $("second").hidden = false;
    offer("text2", m.example2);
    if (m.task === "text-classification") $("text-label").textContent = "First text";
  }
  for (const name of Object.keys(m.files)) {
    const option = new Option(name === "q8" ? "int8" : name, name, false, name === page.dtype);
    $("dtype").append(option);
  }
  $("dtype").addEventListener("change", () => {
    // The page loads again with the other model: what is typed in the boxes comes back (see keepTyped).
    keepTyped((key, id) => sessionStorage.setItem(key, $(id).value));
    const query = new URLSearchParams(location.search);
    query.set("dtype", $("dtype").value);
    location.search = query.toString();
  });
  $("run").disabled = false;
  showTimings();
  document.body.dataset.state = "ready";
  page.ready = true;
  if (page.asked) predict();
}

function offer(id, example) {
  // The example goes only into a box still empty: the text boxes take typing while the model loads
  // (seconds, for a full-size model), and what was typed then is what the user wants predicted.
  if (!$(id).value) $(id).value = example || "";
}

function keepTyped(each) {
  // The text boxes' contents across the reload that switches models, in this tab's sessionStorage;
  // storage the browser refuses (a file:// page, storage turned off) only loses the text, as before.
  try {
    for (const id of ["text", "text2"]) each(`albert-web-${id}`, id);
  } catch (error) {
    console.warn("the typed text is not kept across the reload:", error);
  }
}

keepTyped((key, id) => {
  const kept = sessionStorage.getItem(key);
  sessionStorage.removeItem(key);
  if (kept !== null) $(id).value = kept;
});
// From the start, so that a submit before the model has loaded is held (see predict), never sent.
$("form").addEventListener("submit", predict);
load().then(setUp, fail);
