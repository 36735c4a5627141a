#!/usr/bin/env python3
"""Writes the tokenizer parity corpus (tests/data/tokenizer_corpus.jsonl).

Deterministic from a seed; standard library only. Each line is {"text": str, "kind": str}.
Strings with unpaired surrogates are kept as JSON escapes ("\\ud800"); the C++ test reads the
matching "utf8_hex" field (bytes as Python's 'surrogatepass' encodes them) instead of "text".

Run: python3 scripts/make_tokenizer_corpus.py tests/data/tokenizer_corpus.jsonl
"""
import json
import random
import sys

SEED = 20261202

WORDS = (
    "the quick brown fox jumps over lazy dog inference engine token model cache batch "
    "decode prefill attention expert router window compressed sparse latency throughput "
    "I you we they it's don't can't won't we'll they've she'd Hello World OpenAI DeepSeek "
    "naïve café résumé coöperate façade jalapeño über straße Ångström"
).split()
PUNCT = list(".,;:!?-()[]{}\"'/\\@#$%^&*_+=<>|`~")
CJK_COMMON = [chr(c) for c in range(0x4E00, 0x9FA6)]
CJK_OUTSIDE_RANGE = [chr(c) for c in range(0x9FA6, 0x9FFF)] + [chr(c) for c in range(0x3400, 0x3500)]
HIRAGANA = [chr(c) for c in range(0x3041, 0x3097)]
KATAKANA = [chr(c) for c in range(0x30A1, 0x30FB)] + ["ー"]
HALFWIDTH_KANA = [chr(c) for c in range(0xFF66, 0xFF9E)]
CJK_PUNCT = list("，。、！？：；「」『』（）【】《》…　")
EMOJI = ["😀", "😂", "🥲", "👍", "👍🏽", "❤️", "🇺🇸", "🇯🇵", "👨‍👩‍👧‍👦", "🧑🏿‍💻", "🏳️‍🌈",
         "✨", "🔥", "🚀", "©", "™", "☕", "⚡", "🤖", "🫠", "1️⃣", "#️⃣"]
OTHER_SCRIPTS = [
    "안녕하세요 세계", "مرحبا بالعالم", "שלום עולם", "สวัสดีชาวโลก", "नमस्ते दुनिया",
    "Привет, мир", "Γειά σου Κόσμε", "e\u0301 a\u0300 o\u0308 n\u0303", "ﬁ ﬂ ǅ", "Ⅻ ⅷ ½ ² ³ ٣٤٥ ０１２",
    "ǂǃ ʼ ˈ", "ᚠᛇᚻ", "ꙮ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𝟘𝟙𝟚", "\u200b\u200c\u200d", "\ufeffBOM", "\u00ad soft hyphen",
]
SPECIAL_TEXT = [
    "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>", "<｜User｜>", "<｜Assistant｜>",
    "<think>", "</think>", "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>",
    "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>", "<｜tool▁output▁begin｜>", "<｜place▁holder▁no▁7｜>",
    "<｜User", "｜>", "<think", "<|User|>", "<｜fim▁hole｜>", "<｜fim▁begin｜>", "<｜fim▁end｜>",
]
CODE = [
    "def add(a, b):\n    return a + b\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += v[i];\n}\n",
    "const f = async (x) => { await g(x?.y ?? 0); };",
    "#include <vector>\nint main() { std::vector<int> v{1,2,3}; return v.size(); }\r\n",
    "SELECT id, name FROM users WHERE age >= 21 ORDER BY name DESC;",
    "if __name__ == \"__main__\":\n    main()\n",
    "x = [i**2 for i in range(10) if i % 2 == 0]  # squares\n",
    "fn main() -> Result<(), Box<dyn Error>> {\n    println!(\"{:?}\", 0x1F);\n    Ok(())\n}",
    "<div class=\"a\">&nbsp;&lt;b&gt;</div>",
    "{\"key\": [1, 2.5e-3, null, true], \"nested\": {\"a\": \"b\"}}",
    "    \n\t\t  \n",
    "$ ls -la | grep '^d' && echo \"done\"\n",
]


def rand_choice_str(rng, pool, lo, hi):
    return "".join(rng.choice(pool) for _ in range(rng.randint(lo, hi)))


def english(rng):
    words = [rng.choice(WORDS) for _ in range(rng.randint(1, 25))]
    out = []
    for w in words:
        if rng.random() < 0.1:
            w = w.upper()
        out.append(w)
        if rng.random() < 0.15:
            out.append(rng.choice(PUNCT))
    sep = rng.choice([" ", " ", " ", "  ", "\n", "\t"])
    return sep.join(out)


def chinese(rng):
    parts = []
    for _ in range(rng.randint(1, 6)):
        r = rng.random()
        if r < 0.6:
            parts.append(rand_choice_str(rng, CJK_COMMON, 1, 12))
        elif r < 0.7:
            parts.append(rand_choice_str(rng, CJK_OUTSIDE_RANGE, 1, 4))
        elif r < 0.85:
            parts.append(rng.choice(CJK_PUNCT))
        else:
            parts.append(rng.choice([" ", "abc", "GPU", "123", "2026年"]))
    return "".join(parts)


def japanese(rng):
    pools = [HIRAGANA, KATAKANA, CJK_COMMON, HALFWIDTH_KANA, CJK_PUNCT]
    return "".join(rand_choice_str(rng, rng.choice(pools), 1, 8) for _ in range(rng.randint(1, 6)))


def numbers(rng):
    pieces = []
    for _ in range(rng.randint(1, 8)):
        r = rng.random()
        if r < 0.4:
            pieces.append(str(rng.randint(0, 10 ** rng.randint(1, 12))))
        elif r < 0.6:
            pieces.append(f"{rng.uniform(-1e6, 1e6):.{rng.randint(0, 6)}f}")
        elif r < 0.7:
            pieces.append(f"{rng.random():e}")
        elif r < 0.8:
            pieces.append("".join(chr(0x0660 + rng.randint(0, 9)) for _ in range(rng.randint(1, 5))))
        elif r < 0.9:
            pieces.append("".join(chr(0xFF10 + rng.randint(0, 9)) for _ in range(rng.randint(1, 5))))
        else:
            pieces.append(rng.choice(["Ⅻ", "½", "²³", "١٢٣", "৪৫", "1,234,567.89", "0x7fff", "1e-9"]))
    return rng.choice([" ", "", ", ", "+", "\n"]).join(pieces)


def whitespace(rng):
    ws = [" ", "  ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2009", "\v", "\f", "\u2028"]
    out = []
    for _ in range(rng.randint(1, 10)):
        out.append(rand_choice_str(rng, ws, 1, 6))
        if rng.random() < 0.6:
            out.append(rng.choice(["a", "word", "。", "!", "x=1", "中文", "😀"]))
    return "".join(out)


def special_text(rng):
    out = []
    for _ in range(rng.randint(1, 6)):
        r = rng.random()
        if r < 0.5:
            out.append(rng.choice(SPECIAL_TEXT))
        else:
            out.append(rng.choice([" hello", "world ", "\n", "你好", " ", "<", ">", "｜", "x"]))
    return "".join(out)


def random_unicode(rng):
    out = []
    for _ in range(rng.randint(1, 20)):
        r = rng.random()
        if r < 0.3:
            cp = rng.randint(0x20, 0x7E)
        elif r < 0.6:
            cp = rng.randint(0xA0, 0xD7FF)
        elif r < 0.75:
            cp = rng.randint(0xE000, 0xFFFD)
        elif r < 0.9:
            cp = rng.randint(0x10000, 0x10FFFF)
        else:
            cp = rng.randint(0x0, 0x1F)
        out.append(chr(cp))
    return "".join(out)


def mixed(rng):
    gens = [english, chinese, japanese, numbers, whitespace, special_text, emoji_text, code_text]
    return "".join(rng.choice(gens)(rng) for _ in range(rng.randint(2, 5)))


def emoji_text(rng):
    return "".join(rng.choice(EMOJI + [" ", "a", "!", "\u200d", "\ufe0f"]) for _ in range(rng.randint(1, 12)))


def code_text(rng):
    s = rng.choice(CODE)
    if rng.random() < 0.5:
        s = s.replace("    ", "\t")
    if rng.random() < 0.3:
        s = s * rng.randint(2, 3)
    return s


def lone_surrogate(rng):
    sur = chr(rng.choice([0xD800, 0xDBFF, 0xDC00, 0xDFFF, rng.randint(0xD800, 0xDFFF)]))
    return rng.choice(["", "abc", "你好", "😀"]) + sur + rng.choice(["", "xyz", " ", "中"])


GENERATORS = [
    ("english", english, 400), ("chinese", chinese, 250), ("japanese", japanese, 200),
    ("code", code_text, 200), ("emoji", emoji_text, 150), ("numbers", numbers, 200),
    ("whitespace", whitespace, 200), ("special", special_text, 150), ("random_unicode", random_unicode, 200),
    ("mixed", mixed, 150), ("surrogate", lone_surrogate, 20),
]


def main():
    rng = random.Random(SEED)
    rows = [{"text": s, "kind": "fixed"} for s in OTHER_SCRIPTS + SPECIAL_TEXT + CODE + EMOJI + ["", " ", "\n"]]
    for kind, gen, count in GENERATORS:
        rows.extend({"text": gen(rng), "kind": kind} for _ in range(count))
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        for row in rows:
            row["utf8_hex"] = row["text"].encode("utf-8", "surrogatepass").hex()
            f.write(json.dumps(row, ensure_ascii=True) + "\n")
    print(f"wrote {len(rows)} strings")


if __name__ == "__main__":
    main()
