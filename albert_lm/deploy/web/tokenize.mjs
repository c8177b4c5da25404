// Tokenize texts with transformers.js, as a web export's page does: node tokenize.mjs FOLDER TEXTS.jsonl
//
// FOLDER holds tokenizer.json and tokenizer_config.json (albert_lm.deploy.web_tokenizer writes them).
// Each line of TEXTS.jsonl is a string, a [text, pair] array, or an object
// {"text": ..., "text_pair": ..., "add_special_tokens": true}. For each line one JSON line is printed:
// {"input_ids": [...], "token_type_ids": [...], "attention_mask": [...]}.
// The npm packages are read from $ALBERT_WEB_MODULES (default: .web/node_modules of this repository).
import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const modules = process.env.ALBERT_WEB_MODULES || path.resolve(here, "../../../.web/node_modules");

function fail(message) {
  process.stderr.write(`tokenize.mjs: ${message}\n`);
  process.exit(2);
}

function parse(line, number) {
  let item;
  try {
    item = JSON.parse(line);
  } catch (e) {
    fail(`line ${number}: not JSON (${e.message})`);
  }
  if (typeof item === "string") return { text: item };
  if (Array.isArray(item)) return { text: item[0], text_pair: item[1] ?? null };
  if (item && typeof item.text === "string") return item;
  fail(`line ${number}: expected a string, a [text, pair] array or {"text": ...}`);
}

async function main() {
  const [folder, texts] = process.argv.slice(2);
  if (!folder || !texts) fail("usage: node tokenize.mjs TOKENIZER_FOLDER TEXTS.jsonl");
  const entry = path.join(modules, "@huggingface", "transformers", "dist", "transformers.node.mjs");
  let lib;
  try {
    lib = await import(pathToFileURL(entry).href);
  } catch (e) {
    fail(`cannot load transformers.js from ${modules} (${e.message})`);
  }
  const { AutoTokenizer, env } = lib;
  env.allowRemoteModels = false;
  env.allowLocalModels = true;
  const absolute = path.resolve(folder);
  env.localModelPath = path.dirname(absolute) + path.sep;
  const tokenizer = await AutoTokenizer.from_pretrained(path.basename(absolute), { local_files_only: true });
  const lines = readFileSync(texts, "utf8").split("\n");
  const out = [];
  lines.forEach((line, i) => {
    if (line.trim() === "") return;
    const item = parse(line, i + 1);
    const encoded = tokenizer(item.text, {
      text_pair: item.text_pair ?? null,
      add_special_tokens: item.add_special_tokens ?? true,
      return_token_type_ids: true,
      return_tensor: false,
    });
    out.push(
      JSON.stringify({
        input_ids: Array.from(encoded.input_ids, Number),
        token_type_ids: Array.from(encoded.token_type_ids ?? [], Number),
        attention_mask: Array.from(encoded.attention_mask, Number),
      }),
    );
  });
  process.stdout.write(out.join("\n") + (out.length ? "\n" : ""));
}

main().catch((e) => fail(e.stack || String(e)));
