"""RACE: reading comprehension as four-way multiple choice (Lai et al., 2017).

Two layouts are read:
- one JSON object per question per line (`example_id`, `article`, `question`, `options`, `answer`
  A-D), as in ../shared/data/race;
- the original release: `RACE/{train,dev,test}/{middle,high}/*.txt`, each file one JSON object per
  article with lists `questions`, `options`, `answers` and an `id`.

Each option becomes one sequence, as in google-research's ALBERT `race_utils` and transformers'
multiple-choice example: [CLS] article [SEP] question-with-option [SEP], where a cloze question
("... _ ...") has the blank filled with the option and any other question is followed by it. The
question+option part keeps at most `max_qa_length` tokens (128, google-research's default): its end,
where the option is, as google-research keeps it. The article is cut to what is left, so that every
sequence is at most `max_seq_length` tokens. Where question+option would leave the article less than
half of a short `max_seq_length`, they are cut further, keeping the option (`qa_tokens`), and a
warning counts them. Metric: accuracy, plus middle / high accuracy when the example ids say which (RACE's paper
reports both). Predictions name each question by `example_id`, its position `index` in the split and,
for a JSON Lines file, its `line` (one article has several questions, all with one id in some files).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from albert_lm.files import InputError, atomic_write, iter_jsonl, read_json_object
from albert_lm.tasks import metrics
from albert_lm.tasks.task import Feature, Task, TokenizerLike

logger = logging.getLogger(__name__)

LETTERS = ("A", "B", "C", "D")


@dataclass
class RaceExample:
    example_id: str
    article: str
    question: str
    options: list[str]
    answer: str | None  # "A".."D"; None for an unlabelled file
    level: str  # "middle", "high" or ""
    line: int | None = None  # the row's line in a JSON Lines file


def _level(name: str) -> str:
    low = name.lower()
    return "middle" if "middle" in low else "high" if "high" in low else ""


def _shown(value: object) -> str:
    """A value as the file wrote it, shortened: null, 3, ["a"], "" ..."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:37] + "..."


def _check(obj: dict, path: Path, line: int | None, fields: tuple[str, ...]) -> None:
    for f in fields:
        if f not in obj:
            raise InputError(path, f"missing field {f!r}", line=line)


def _example(
    path: Path,
    line: int | None,
    eid: str,
    article: str,
    question: str,
    options: object,
    answer: object,
    require: bool,
) -> RaceExample:
    if not isinstance(article, str) or not article.strip():
        raise InputError(
            path, f"field 'article': expected a non-empty text, got {_shown(article)}", line=line
        )
    if not isinstance(question, str):
        raise InputError(path, f"field 'question': expected a text, got {_shown(question)}", line=line)
    if (
        not isinstance(options, list)
        or len(options) != len(LETTERS)
        or not all(isinstance(o, str) for o in options)
    ):
        raise InputError(path, f"field 'options' must be a list of {len(LETTERS)} strings", line=line)
    if blank := [LETTERS[i] for i, o in enumerate(options) if not o.strip()]:
        raise InputError(
            path,
            f"field 'options': option {', '.join(blank)} is empty (expected the text of each)",
            line=line,
        )
    if answer is None and require:
        raise InputError(path, "missing field 'answer'", line=line)
    if answer is not None and answer not in LETTERS:
        raise InputError(path, f"answer {answer!r} is not one of {', '.join(LETTERS)}", line=line)
    return RaceExample(eid, article, question, list(options), answer, _level(eid or str(path)), line)


def read_race_jsonl(path: Path, require_answers: bool = True) -> list[RaceExample]:
    if not path.is_file():
        raise FileNotFoundError(f"no RACE file at {path}")
    examples = []
    for n, obj in iter_jsonl(path):
        _check(obj, path, n, ("article", "question", "options"))
        eid = str(obj.get("example_id", obj.get("id", f"{path.stem}-{n}")))
        examples.append(
            _example(
                path,
                n,
                eid,
                obj["article"],
                obj["question"],
                obj["options"],
                obj.get("answer"),
                require_answers,
            )
        )
    if not examples:
        raise InputError(path, "empty file")
    return examples


def read_race_folder(folder: Path, require_answers: bool = True) -> list[RaceExample]:
    """The original release: every *.txt under `folder` (e.g. RACE/dev, or RACE/dev/middle)."""
    files = sorted(folder.rglob("*.txt"))
    if not files:
        raise InputError(folder, "no RACE *.txt files in this folder")
    examples = []
    for path in files:
        obj = read_json_object(path, "RACE")
        _check(obj, path, None, ("article", "questions", "options"))
        for name in ("questions", "options", "answers"):
            if name in obj and not isinstance(obj[name], list):
                raise InputError(path, f"field {name!r}: expected a list, got {_shown(obj[name])}")
        answers = obj.get("answers", [None] * len(obj["questions"]))
        if not (len(obj["questions"]) == len(obj["options"]) == len(answers)):
            raise InputError(path, "'questions', 'options' and 'answers' differ in length")
        rel = path.relative_to(folder.parent).as_posix()
        for k, (q, opts, ans) in enumerate(zip(obj["questions"], obj["options"], answers, strict=True)):
            examples.append(_example(path, None, f"{rel}-{k}", obj["article"], q, opts, ans, require_answers))
    return examples


def qa_text(question: str, option: str) -> str:
    """Fill a cloze blank with the option, else append the option to the question."""
    return question.replace("_", option) if "_" in question else f"{question} {option}"


def qa_tokens(tokenizer: TokenizerLike, question: str, option: str, limit: int) -> tuple[list[int], bool]:
    """(`qa_text` in at most `limit` tokens, whether it was cut), keeping the option: the whole text where
    it fits, else the option (its start, where it alone is longer) with the end of the question before
    it and, for a cloze question, what follows the blank as far as room is left."""
    qa = tokenizer.encode(qa_text(question, option), add_special_tokens=False)
    if len(qa) <= limit:
        return qa, False
    blank = question.find("_")
    head, tail = (question[:blank], qa_text(question[blank:], option)) if blank >= 0 else (question, option)
    before = tokenizer.encode(head, add_special_tokens=False) if head.strip() else []
    after = tokenizer.encode(tail, add_special_tokens=False)  # starts with the option
    option_len = min(len(tokenizer.encode(option, add_special_tokens=False)), limit)
    keep_after = min(len(after), max(option_len, limit - len(before)))
    keep_before = min(len(before), limit - keep_after)
    return before[len(before) - keep_before :] + after[:keep_after], True


class RaceTask(Task):
    name = "race"
    head = "multiple_choice"
    main_metric = "accuracy"
    labels = LETTERS

    def __init__(self, max_qa_length: int = 128) -> None:
        self.max_qa_length = max_qa_length

    def split_file(self, data: Path, split: str) -> Path | None:
        if data.is_file():
            return data
        for cand in (data / split, data / f"{split}.jsonl", data / f"race_middle_{split}.jsonl"):
            if cand.exists():
                return cand
        found = sorted(data.glob(f"*{split}*.jsonl"))
        return found[0] if found else None

    def read(self, path: Path, split: str) -> list[RaceExample]:
        require = not split.startswith("test")
        return read_race_folder(path, require) if path.is_dir() else read_race_jsonl(path, require)

    def featurize(self, examples, tokenizer: TokenizerLike, max_seq_length: int, training: bool = False):
        """Four sequences per question, each at most `max_seq_length` tokens (module docstring)."""
        room = max_seq_length - 3  # [CLS] article [SEP] question+option [SEP]
        if room < 2:
            raise ValueError(f"--max-seq-length {max_seq_length}: RACE needs at least 5 tokens per sequence")
        features: list[Feature] = []
        cache: dict[str, list[int]] = {}
        squeezed = 0  # questions whose question+option were cut below max_qa_length to fit
        for i, ex in enumerate(examples):
            if ex.article not in cache:
                cache = {ex.article: tokenizer.encode(ex.article, add_special_tokens=False)}
            article = cache[ex.article]
            # google-research's cut (question+option to max_qa_length, the article to the rest), but
            # question+option leave the article at least half of the room (or all of a shorter one)
            limit = min(self.max_qa_length, room - min(len(article), room // 2))
            ids, types, cut = [], [], False
            for option in ex.options:
                qa, was_cut = qa_tokens(tokenizer, ex.question, option, limit)
                cut = cut or (was_cut and limit < self.max_qa_length)
                a = article[: room - len(qa)]
                ids.append([tokenizer.cls_token_id, *a, tokenizer.sep_token_id, *qa, tokenizer.sep_token_id])
                types.append([0] * (len(a) + 2) + [1] * (len(qa) + 1))
            squeezed += cut
            feat: Feature = {"input_ids": ids, "token_type_ids": types, "example_index": i}
            if ex.answer is not None:
                feat["labels"] = LETTERS.index(ex.answer)
            features.append(feat)
        if squeezed:
            logger.warning(
                "race: %d of %d questions had question+option cut to fit max_seq_length %d "
                "(--max-seq-length; the option is kept, the article keeps half)",
                squeezed,
                len(examples),
                max_seq_length,
            )
        return features

    def predict(self, examples, features, outputs) -> list[int]:
        return [int(np.argmax(o["logits"])) for o in outputs]

    def score(self, examples, predictions) -> dict[str, float]:
        gold = [LETTERS.index(ex.answer) for ex in examples]
        out = {"accuracy": metrics.accuracy(predictions, gold)}
        for level in ("middle", "high"):
            idx = [i for i, ex in enumerate(examples) if ex.level == level]
            if idx and len(idx) < len(examples):
                out[f"accuracy_{level}"] = metrics.accuracy(
                    [predictions[i] for i in idx], [gold[i] for i in idx]
                )
        return out

    def write_predictions(self, examples, predictions, folder: Path, split: str) -> Path:
        rows = []
        for i, (ex, p) in enumerate(zip(examples, predictions, strict=True)):
            row = {"example_id": ex.example_id, "index": i, "answer": LETTERS[p]}
            if ex.line is not None:
                row["line"] = ex.line
            rows.append(json.dumps(row, ensure_ascii=False))
        return atomic_write(folder / f"{split}_predictions.jsonl", "\n".join(rows) + "\n")
