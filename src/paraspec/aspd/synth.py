"""Synthetic ASPD tasks: branches independent by construction, answers with exact checkers.

Three families, each an answer of one parallel block (2-4 branches) after a serial lead-in:
- "arith": "Solve each part: A) 47*6 B) 38+45 ..." -> one branch per part, a short worked
  decomposition ending in "= result." (checker: the part's line ends with its exact result);
- "facts": "Give the capital, language and currency of Japan." from the built-in COUNTRIES
  table (checker: each line names its fact's value);
- "questions": independent sub-questions from the built-in QUESTIONS table (checker: each
  line holds its answer's key word).
The two splits share no table row and no arithmetic part: `split="heldout"` draws its countries
and questions from HELDOUT_COUNTRIES / HELDOUT_QUESTIONS, which training never sees, and its
arithmetic parts from the expressions whose hash falls in the held-out fifth (same operand
ranges, same decompositions, so the held-out set measures generalisation and not recall). It
also uses another seed, and `generate` drops any item whose prompt is in `exclude`.
"""

from __future__ import annotations

import random
import re
import zlib

from .data import Block, Branch, Example

# country: capital, language, currency, continent
COUNTRIES = {
    "France": ("Paris", "French", "the euro", "Europe"),
    "Japan": ("Tokyo", "Japanese", "the yen", "Asia"),
    "Italy": ("Rome", "Italian", "the euro", "Europe"),
    "Spain": ("Madrid", "Spanish", "the euro", "Europe"),
    "Germany": ("Berlin", "German", "the euro", "Europe"),
    "Egypt": ("Cairo", "Arabic", "the Egyptian pound", "Africa"),
    "Brazil": ("Brasilia", "Portuguese", "the real", "South America"),
    "Mexico": ("Mexico City", "Spanish", "the peso", "North America"),
    "Canada": ("Ottawa", "English and French", "the Canadian dollar", "North America"),
    "India": ("New Delhi", "Hindi", "the rupee", "Asia"),
    "China": ("Beijing", "Chinese", "the yuan", "Asia"),
    "Russia": ("Moscow", "Russian", "the ruble", "Europe"),
    "Kenya": ("Nairobi", "Swahili", "the shilling", "Africa"),
    "Peru": ("Lima", "Spanish", "the sol", "South America"),
    "Australia": ("Canberra", "English", "the Australian dollar", "Oceania"),
    "Greece": ("Athens", "Greek", "the euro", "Europe"),
    "Poland": ("Warsaw", "Polish", "the zloty", "Europe"),
    "Sweden": ("Stockholm", "Swedish", "the krona", "Europe"),
    "Turkey": ("Ankara", "Turkish", "the lira", "Asia"),
    "Argentina": ("Buenos Aires", "Spanish", "the peso", "South America"),
    "Portugal": ("Lisbon", "Portuguese", "the euro", "Europe"),
    "Norway": ("Oslo", "Norwegian", "the krone", "Europe"),
    "Thailand": ("Bangkok", "Thai", "the baht", "Asia"),
    "Nigeria": ("Abuja", "English", "the naira", "Africa"),
}
HELDOUT_COUNTRIES = ("Egypt", "Peru", "Sweden", "Thailand", "Canada", "Greece")
FACTS = ("capital", "language", "currency", "continent")
FACT_TITLES = {
    "capital": "Capital",
    "language": "Language",
    "currency": "Currency",
    "continent": "Continent",
}

# question, answer sentence, key word the checker looks for
QUESTIONS = [
    ("How many legs does a spider have?", "A spider has eight legs.", "eight"),
    ("How many legs does an insect have?", "An insect has six legs.", "six"),
    ("What is the opposite of hot?", "The opposite of hot is cold.", "cold"),
    ("What is the opposite of up?", "The opposite of up is down.", "down"),
    ("What is the plural of mouse?", "The plural of mouse is mice.", "mice"),
    ("What is the plural of child?", "The plural of child is children.", "children"),
    ("What color is the sky on a clear day?", "The sky is blue on a clear day.", "blue"),
    ("What do bees make?", "Bees make honey.", "honey"),
    ("How many days are in a week?", "There are seven days in a week.", "seven"),
    ("How many months are in a year?", "There are twelve months in a year.", "twelve"),
    ("What is frozen water called?", "Frozen water is called ice.", "ice"),
    ("Which planet is closest to the Sun?", "Mercury is the planet closest to the Sun.", "Mercury"),
    ("What is the largest ocean?", "The Pacific is the largest ocean.", "Pacific"),
    ("What gas do plants take in?", "Plants take in carbon dioxide.", "carbon dioxide"),
    ("How many sides does a triangle have?", "A triangle has three sides.", "three"),
    ("How many sides does a hexagon have?", "A hexagon has six sides.", "six"),
    ("What is the past tense of go?", "The past tense of go is went.", "went"),
    ("What is the past tense of eat?", "The past tense of eat is ate.", "ate"),
    (
        "What animal is known as the king of the jungle?",
        "The lion is known as the king of the jungle.",
        "lion",
    ),
    (
        "What is the boiling point of water in Celsius?",
        "Water boils at 100 degrees Celsius.",
        "100",
    ),
    ("How many hours are in a day?", "There are 24 hours in a day.", "24"),
    ("What is the first letter of the alphabet?", "The first letter of the alphabet is A.", "A."),
    ("Which season comes after winter?", "Spring comes after winter.", "Spring"),
    ("What do cows drink?", "Cows drink water.", "water"),
    ("What is the color of grass?", "Grass is green.", "green"),
    ("How many wheels does a bicycle have?", "A bicycle has two wheels.", "two"),
    ("What is the opposite of big?", "The opposite of big is small.", "small"),
    ("What is the plural of foot?", "The plural of foot is feet.", "feet"),
]

HELDOUT_QUESTIONS = frozenset(q for q, _, _ in QUESTIONS[1::4])  # 7 of 28, spread over the kinds
SPLITS = ("train", "heldout")

LABELS = "ABCD"


def _in_split(expr: str, split: str) -> bool:
    return (zlib.crc32(expr.encode()) % 5 == 0) == (split == "heldout")


def _arith_part(rng: random.Random) -> tuple[str, str, int]:
    op = rng.choice("*+-")
    if op == "*":
        a, b = rng.randint(12, 49), rng.randint(3, 9)
        t, u = a - a % 10, a % 10
        return f"{a}*{b}", f"{a}*{b} = {t}*{b} + {u}*{b} = {t * b} + {u * b} = {a * b}.", a * b
    a, b = rng.randint(21, 89), rng.randint(12, 59)
    if op == "+":
        return (
            f"{a}+{b}",
            f"{a}+{b} = {a}+{b - b % 10} + {b % 10} = {a + b - b % 10} + {b % 10} = {a + b}.",
            a + b,
        )
    a, b = max(a, b + 10), b
    return (
        f"{a}-{b}",
        f"{a}-{b} = {a}-{b - b % 10} - {b % 10} = {a - b + b % 10} - {b % 10} = {a - b}.",
        a - b,
    )


def _countries(split: str) -> list[str]:
    return sorted(c for c in COUNTRIES if (c in HELDOUT_COUNTRIES) == (split == "heldout"))


def _questions(split: str) -> list[tuple[str, str, str]]:
    return [q for q in QUESTIONS if (q[0] in HELDOUT_QUESTIONS) == (split == "heldout")]


def arith(rng: random.Random, idx: str, split: str = "train") -> Example:
    k = rng.randint(2, 4)
    parts = []
    while len(parts) < k:
        part = _arith_part(rng)
        if _in_split(part[0], split):
            parts.append(part)
    prompt = "Solve each part: " + " ".join(
        f"{LABELS[i]}) {e}" for i, (e, _, _) in enumerate(parts)
    )
    block = Block(tuple(Branch(LABELS[i], c) for i, (_, c, _) in enumerate(parts)))
    checks = [{"kind": "result", "expr": e, "value": v} for e, _, v in parts]
    return Example(idx, "arith", prompt, ["Here is each part.\n", block], checks)


def _fact_sentence(country: str, fact: str) -> tuple[str, str]:
    capital, language, currency, continent = COUNTRIES[country]
    return {
        "capital": (f"The capital of {country} is {capital}.", capital),
        "language": (f"People in {country} mainly speak {language}.", language),
        "currency": (f"The currency of {country} is {currency}.", currency),
        "continent": (f"{country} is a country in {continent}.", continent),
    }[fact]


def facts(rng: random.Random, idx: str, split: str = "train") -> Example:
    country = rng.choice(_countries(split))
    chosen = rng.sample(FACTS, rng.randint(2, 4))
    names = ", ".join(chosen[:-1]) + " and " + chosen[-1]
    prompt = f"Give the {names} of {country}."
    sentences = [_fact_sentence(country, f) for f in chosen]
    block = Block(tuple(Branch(FACT_TITLES[f], s) for f, (s, _) in zip(chosen, sentences)))
    checks = [{"kind": "contains", "value": v} for _, v in sentences]
    return Example(idx, "facts", prompt, [f"Here are the facts about {country}.\n", block], checks)


def questions(rng: random.Random, idx: str, split: str = "train") -> Example:
    chosen = rng.sample(_questions(split), rng.randint(2, 4))
    prompt = "Answer these questions: " + " ".join(
        f"{i + 1}. {q}" for i, (q, _, _) in enumerate(chosen)
    )
    block = Block(tuple(Branch(f"Q{i + 1}", a) for i, (_, a, _) in enumerate(chosen)))
    checks = [{"kind": "contains", "value": key} for _, _, key in chosen]
    return Example(idx, "questions", prompt, ["Here are the answers.\n", block], checks)


FAMILIES = {"arith": arith, "facts": facts, "questions": questions}
WEIGHTS = {"arith": 0.5, "facts": 0.25, "questions": 0.25}


def generate(
    n: int,
    seed: int,
    exclude: set[str] = frozenset(),
    families: dict[str, float] | None = None,
    split: str = "train",
) -> list[Example]:
    """n examples of `split`'s tables and parts drawn with `seed`, none whose prompt is in
    `exclude`, no prompt twice."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, not {split!r}")
    weights = families or WEIGHTS
    rng = random.Random(seed)
    names = sorted(weights)
    out, seen, tries = [], set(exclude), 0
    while len(out) < n and tries < 50 * n:
        tries += 1
        fam = rng.choices(names, [weights[f] for f in names])[0]
        ex = FAMILIES[fam](rng, f"{split[0]}{seed}-{len(out):05d}", split)
        if ex.prompt not in seen:
            seen.add(ex.prompt)
            out.append(ex)
    return out


# the parts' titles
_LABEL = re.compile(r"^(?:[%s]|Q\d|%s)(?::|\))\s+" % (LABELS, "|".join(FACT_TITLES.values())))


def check(example: Example, answer: str) -> bool:
    """Exact checker on a plain answer: one line per part, in order, each with its exact result
    (arith: the line starts with the expression and its last number is the result). A line may
    start with its part's label ("A: ", "Q2) "), as the control writes them. An example without
    checks cannot be scored (ValueError): the real-prompt set is judged another way."""
    if not example.checks:
        raise ValueError(f"example {example.id} has no checks to score an answer by")
    lines = [_LABEL.sub("", ln.strip()) for ln in answer.strip().splitlines() if ln.strip()]
    lines = lines[-len(example.checks) :] if len(lines) >= len(example.checks) else []
    if not lines:
        return False
    for line, c in zip(lines, example.checks):
        if c["kind"] == "result":
            nums = re.findall(r"-?\d+", line)
            if not line.startswith(c["expr"] + " =") or not nums or int(nums[-1]) != c["value"]:
                return False
        elif c["value"] not in line:
            return False
    return True
