#!/usr/bin/env python3
"""Golden token ids for ferry's tokenizer tests, from Hugging Face `tokenizers`.

Reads the SmolLM2 GGUF's vocabulary and merges with the `gguf` package, builds the tokenizer exactly as
SmolLM2's published tokenizer.json defines it (BPE model; pre-tokenizer Sequence[Digits(individual_digits=True),
ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)]; ByteLevel decoder; the 17 special tokens,
ids 0..16, as added tokens with special=true), and writes:
  tests/golden/tokenizer/smollm2.jsonl           one line per corpus string:
      {"text": ..., "ids": [...],        encode(add_special_tokens=False), special-token text parsed
                    "ids_plain": [...]}  the same with encode_special_tokens=True (special text as plain text)
  tests/golden/tokenizer/smollm2-tokenizer.json  that tokenizer, saved (reused by the safetensors path)

Usage: /opt/refvenv/bin/python reference/make_tokenizer_golden.py [--model models/SmolLM2-135M-Instruct.Q4_1.gguf]
"""
import argparse
import json
import random
from pathlib import Path

import gguf
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent


def read_gguf_vocab(path):
    reader = gguf.GGUFReader(str(path))
    f = reader.fields
    tokens = f["tokenizer.ggml.tokens"].contents()
    merges = f["tokenizer.ggml.merges"].contents()
    types = f["tokenizer.ggml.token_type"].contents()
    assert f["tokenizer.ggml.model"].contents() == "gpt2"
    assert f["tokenizer.ggml.pre"].contents() == "smollm"
    return tokens, merges, types


def build_tokenizer(tokens, merges, types):
    vocab = {t: i for i, t in enumerate(tokens)}
    merge_pairs = [tuple(m.split(" ", 1)) for m in merges]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merge_pairs, unk_token=None, fuse_unk=False,
                               byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    special = [i for i, t in enumerate(types) if t == 3]
    assert special == list(range(17)), special
    tok.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False) for i in special])
    return tok


def corpus():
    fixed = [
        "", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\r\n\r\n", " \n ", "\t\t\tindented", "a\tb\tc",
        "Hello world", " Hello world", "Hello World!", "Hello, world! How are you?", "hello   world",
        "trailing spaces   ", "   leading spaces", "mixed \t whitespace \n here", "line1\nline2\r\nline3\rline4",
        "I'm", "you're", "they've", "she'll", "he'd", "it's", "I'M SHOUTING", "don't won't can't",
        "'s 't 're 've 'm 'll 'd", "O'Neil's dog's bone", "rock 'n' roll",
        "0", "7", "42", "123", "1234", "12345678901234567890", "3.14159", "-273.15", "1,000,000", "1e-9",
        "2024-06-01T12:34:56Z", "+1 (555) 123-4567", "v1.2.3-rc.4", "0x1F 0b1010 0o777", "½ ¾ ² ³ ①②③",
        "١٢٣ ٤٥٦", "१२३४", "٣.١٤", "Ⅻ Ⅳ", "१०० रुपये",
        "你好，世界！", "我爱自然语言处理。", "日本語のテキストです。", "カタカナとひらがな", "東京都渋谷区",
        "한국어 문장입니다.", "안녕하세요, 반갑습니다!", "مرحبا بالعالم", "السلام عليكم ورحمة الله",
        "नमस्ते दुनिया", "हिन्दी में एक वाक्य।", "Привет, мир!", "Съешь же ещё этих мягких французских булок",
        "Γειά σου Κόσμε", "Ελληνικά γράμματα: αβγδεζηθ", "สวัสดีชาวโลก", "ภาษาไทยไม่มีช่องว่าง",
        "שלום עולם", "Xin chào thế giới", "Türkçe karakterler: ğüşöçı", "Zürich Straße Æsir Øl",
        "ქართული ენა", "Հայերեն", "ᚠᛇᚻ᛫ᛒᛦᚦ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙", "ℕ ℤ ℚ ℝ ℂ", "∀x∈ℝ: x²≥0",
        "😀", "😀😃😄", "👍🏽", "👍🏻👍🏿", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇺🇸🇯🇵", "❤️", "✅ done", "🚀 (normal) 😶‍🌫️ (zwj)",
        "emoji at end 🎉", "🧑🏾‍💻 coding", "a👍b", "☕️☕︎",
        "def foo(x):\n    return x * 2\n", "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
        "#include <stdio.h>\nint main(void) { printf(\"hi\\n\"); }", "fn main() { println!(\"{}\", 1 + 2); }",
        "const f = (a, b) => a ?? b;", "SELECT * FROM users WHERE id = 42;", "<div class=\"x\">text</div>",
        "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}", "x = [i**2 for i in range(10) if i % 2]",
        "if err != nil {\n\t\treturn nil, err\n\t}", "$ ls -la | grep foo && echo ok", "a+b-c*d/e%f^g",
        "https://example.com/path?q=1&r=two#frag", "user@example.org", "C:\\Users\\name\\file.txt",
        "<|im_start|>user\nHello<|im_end|>", "<|im_start|>assistant\n", "<|endoftext|>",
        "text<|im_end|>more", "<|im_start|><|im_end|>", "<|im_start", "im_start|>", "<repo_name>ferry<file_sep>",
        "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n",
        "<jupyter_code>print(1)<jupyter_output>1", "<<|im_end|>>",
        "\u00a0non-breaking\u00a0space", "zero\u200bwidth", "soft\u00adhyphen", "BOM\ufeffinside",
        "combining e\u0301 vs é", "NEL\u0085char", "line\u2028sep\u2029para", "ideographic\u3000space",
        "\u0000null byte", "\x07bell\x1bescape", "tab\vvertical\fform", "\U0010FFFF max", "\ue000 private use",
        "�replacement", "A\u030A\u0323", "ﬁ ligature", "Ｆｕｌｌｗｉｄｔｈ", "....", "!!!???", "---===+++",
        "''''''```````\"\"\"\"", "((()))[[[]]]{{{}}}", "a" * 200, " " * 50, "ab" * 100, "1" * 64,
        "\n" * 10, "\t \t \t", "word " * 30,
    ]
    rng = random.Random(1234)
    pieces = ["hello", " world", "你好", "мир", "عالم", "नमस्ते", "😀", "👨‍👩‍👧", "123", " 4567", "\n", "  ", "\t",
              "'s", "don't", "<|im_start|>", "<|im_end|>", "x=1;", "λ", "ñ", "ß", "한국", "ไทย", "Ω", "...", "?!",
              "\r\n", "CamelCase", "snake_case", "1.5e10", "🏽", "é", "€100", "#", "@", "٣", "½"]
    generated = []
    for _ in range(200):
        n = rng.randint(1, 8)
        generated.append("".join(rng.choice(pieces) for _ in range(n)))
    out = []
    for s in fixed + generated:
        if s not in out:
            out.append(s)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(ROOT / "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--out", default=str(ROOT / "tests/golden/tokenizer"))
    args = ap.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    tok = build_tokenizer(*read_gguf_vocab(args.model))
    tok.save(str(out_dir / "smollm2-tokenizer.json"))
    texts = corpus()
    assert len(texts) >= 300, len(texts)
    with open(out_dir / "smollm2.jsonl", "w", encoding="utf-8") as f:
        for text in texts:
            tok.encode_special_tokens = False
            ids = tok.encode(text, add_special_tokens=False).ids
            tok.encode_special_tokens = True
            ids_plain = tok.encode(text, add_special_tokens=False).ids
            f.write(json.dumps({"text": text, "ids": ids, "ids_plain": ids_plain}, ensure_ascii=False) + "\n")
    print(f"wrote {len(texts)} strings to {out_dir}")


if __name__ == "__main__":
    main()
