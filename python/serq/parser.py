"""Lexer and parser of dialect S: `grammar.lark` (LALR(1)) plus located, readable errors.

`parse(text, file_id, display_name)` returns the list of top-level nodes (see `ast.py`). Before
parsing, the token stream is scanned once for constructs that are out of scope for now (they are
rejected at their location with "… is not supported yet") and for reserved words that the
grammar does not use, so that neither is ever silently accepted.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pathlib
import re
import sys
import tempfile
from typing import Any

import lark
from lark import Lark, Token, Transformer_NonRecursive, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedToken, VisitError

from .ast import Node
from .kstep import ITEM_WORDS as K_ITEM_WORDS
from .errors import SerqError

# docs/language.md §1: the reserved words (union over dialects).
RESERVED = frozenset("""
use let def fn main device engine pool stage queue workload server session init turn arrive
poisson renewal closed batch none trace ordered hidden set observe hold reserve reuse at admission
cache lease grow drop release load run prefill decode growing tool transfer from to on branch with
else if while loop choose in by end fork join gauge claim given every some iteration of schedule
advance running admit waiting only each at most exclusive first order taking tokens cap block evict
lru preempt lifo requeue head tail fifo ps delay step spill via share maxmin bottleneck sum min max
prefix content after
lag eos
speculate accept
""".split())  # the last three lines: the extensions of docs/content.md, docs/async.md and
# speculative decoding (docs/language.md §7.3)

# Reserved words the grammar does not use: constructs out of scope for now, with the message that
# rejects them at their first token (none at present: every construct of the reference parses).
UNSUPPORTED: dict[str, str] = {}

_GRAMMAR = pathlib.Path(__file__).with_name("grammar.lark")

_EXPR_START = {"NUMBER", "NAME", "LPAR", "MINUS", "BANG", "TILDE", "MIN", "MAX", "SUM", "QUEUE", "TOOL",
               "RUNNING", "WAITING", "BATCH", "ADMISSION"}
_STMT_START = {"TURN", "END", "SET", "OBSERVE", "BRANCH", "IF", "WHILE", "LOOP", "CHOOSE", "HOLD",
               "GROW", "DROP", "RELEASE", "LOAD", "RUN", "TOOL", "FORK", "JOIN", "TRANSFER"}
_ITEM_START = {"DEVICE", "ENGINE", "POOL", "STAGE", "WORKLOAD", "SERVER", "GAUGE", "CLAIM"}
MAX_DEPTH = 200   # brackets: ( [ { open at once
MAX_NESTING = 5_000   # syntax-tree depth: operands of a chain, `else if`s, unary operators
# Dialect P spellings (docs/language.md §15) met where dialect S expects something else.
_P_HINTS = {
    "scheduler": "dialect S writes `schedule { … }`",
    "worker": "dialect S writes `execute (…);`",
    "forward": "dialect S writes `execute (…);`",
    "send": "in dialect S the server calls the engine by name: `E (prompt, output);`",
}
# Operators that could continue an expression: left out of "expected …" when a closer is expected.
_OPERATOR_TEXTS = {"+", "-", "*", "/", "^", "<", ">", "?", "||", "&&", "<=", ">=", "==", "!=", "[", "."}


_LARK_OPTIONS = dict(parser="lalr", lexer="basic", propagate_positions=True, maybe_placeholders=True)


def grammar_cache_dir() -> pathlib.Path:
    """Where the built parser is kept between processes: `$XDG_CACHE_HOME/serq`, else
    `~/.cache/serq`."""
    return pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache") / "serq"


def grammar_cache_file(grammar: str, cache_dir: pathlib.Path) -> pathlib.Path:
    """The cache file of `grammar`'s parser: named by everything the built parser depends on."""
    key = hashlib.sha256("\0".join([grammar, repr(sorted(_LARK_OPTIONS.items())), lark.__version__,
                                     sys.version]).encode("utf-8")).hexdigest()[:24]
    return cache_dir / f"parser-{key}.pickle"


def build_lark(grammar: str, cache_dir: pathlib.Path | None) -> Lark:
    """The LALR parser of `grammar`, loaded from `cache_dir` when an earlier process built it.

    Building costs ~0.5 s per process, loading ~0.05 s. The file name holds a hash of the grammar
    text, the options, lark's version and Python's, so a changed grammar (or an upgraded lark) is
    never served a stale parser: it gets a file of its own. Lark's own `cache=` option writes its
    file in place, where a concurrent process can read it half-written; here the file is written to
    a temporary name and renamed. Any failure to read or write the cache (no such directory, read
    only, a damaged file) falls back silently to building: the cache only saves time.
    """
    if cache_dir is None:
        return Lark(grammar, **_LARK_OPTIONS)
    path = grammar_cache_file(grammar, cache_dir)
    try:
        with open(path, "rb") as f:
            return Lark.load(f)
    except Exception:
        pass
    parser = Lark(grammar, **_LARK_OPTIONS)
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                parser.save(f)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass  # read-only or unusable cache directory: the built parser is just not kept
    return parser


@functools.lru_cache(maxsize=1)
def _lark() -> Lark:
    return build_lark(_GRAMMAR.read_text(encoding="utf-8"), grammar_cache_dir())


@functools.lru_cache(maxsize=1)
def _operators() -> frozenset[str]:
    """The terminal names lark gave the operators (`__ANON_n` for some: found by their text)."""
    return frozenset(t.name for t in _lark().terminals
                     if t.pattern.type == "str" and t.pattern.value in _OPERATOR_TEXTS)


def _terminal_display() -> dict[str, str]:
    out = {"NAME": "a name", "NUMBER": "a number", "STRING": "a string", "$END": "end of file"}
    out.update({terminal: f"'{word}'" for word, terminal in K_STEP_WORDS.items()})
    for t in _lark().terminals:
        if t.pattern.type == "str":
            out[t.name] = f"'{t.pattern.value}'"
    return out


def _show_token(tok: Token) -> str:
    if tok.type == "$END":
        return "end of file"
    v = str(tok.value)
    if len(v) > 30:
        v = v[:27] + "..."
    return f"'{v}'"


def _describe_expected(expected: set[str]) -> list[str]:
    disp = _terminal_display()
    exp = set(expected)
    words: list[str] = []
    if {"NUMBER", "LPAR", "TILDE"} <= exp:
        exp -= _EXPR_START
        words.append("an expression")
    if {"SET", "HOLD", "RUN"} <= exp:
        exp -= _STMT_START
        words.append("a statement")
    if {"DEVICE", "ENGINE", "POOL"} <= exp:
        exp -= _ITEM_START
        words.append("a declaration")
    order = [";", ")", "}", ",", "(", "{", "="]
    rest = sorted((disp.get(e, e) for e in exp if not e.startswith("__ANON") or e in disp),
                  key=lambda s: (order.index(s.strip("'")) if s.strip("'") in order else 99, s))
    return words + rest


def _fmt_expected(items: list[str]) -> str:
    if not items:
        return "something else"
    if len(items) == 1:
        return items[0]
    if len(items) <= 6:
        return ", ".join(items[:-1]) + " or " + items[-1]
    return ", ".join(items[:6]) + ", …"


def decode_source(raw: bytes, display: str) -> str:
    """The text of a source or trace file (UTF-8, a leading byte-order mark dropped); a SerqError
    located at the first byte that is not UTF-8."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        start = raw.rfind(b"\n", 0, e.start) + 1
        line = raw.count(b"\n", 0, e.start) + 1
        col = len(raw[start:e.start].decode("utf-8", "replace")) + 1
        end = raw.find(b"\n", e.start)
        src_line = raw[start:end if end >= 0 else len(raw)].decode("utf-8", "replace")
        raise SerqError(f"the file is not valid UTF-8 (byte 0x{raw[e.start]:02x})", display, line, col,
                        src_line) from None
    return text[1:] if text.startswith("\ufeff") else text


class Source:
    """A loaded source file: its display name and text (for carets)."""

    def __init__(self, name: str, text: str):
        self.name = name
        self.text = text
        # Lines end at "\n" only, as the lexer counts them: `str.splitlines` would also split at a
        # form feed or U+2028 and show the wrong line under an error.
        self.lines = [x[:-1] if x.endswith("\r") else x for x in text.split("\n")]
        if self.lines and self.lines[-1] == "" and text.endswith("\n"):
            self.lines.pop()

    def line(self, n: int) -> str | None:
        if 1 <= n <= len(self.lines):
            return self.lines[n - 1]
        if n == len(self.lines) + 1:
            return ""
        return None

    def error(self, message: str, line: int, column: int) -> SerqError:
        return SerqError(message, self.name, line, column, self.line(line))


def _char_desc(c: str) -> str:
    if c.isprintable() and not c.isspace():
        return f"'{c}'"
    return f"U+{ord(c):04X}"


def _prescan_token(src: Source, tokens: list[Token], i: int, depth: int) -> int:
    """Check token i for constructs out of scope and reserved words; the bracket depth after it."""
    tok = tokens[i]
    t = tok.type
    if t in ("LPAR", "LSQB", "LBRACE"):
        depth += 1
        if depth > MAX_DEPTH:
            raise src.error(f"nested more than {MAX_DEPTH} levels deep", tok.line, tok.column)
    elif t in ("RPAR", "RSQB", "RBRACE"):
        depth -= 1
    if t == "NAME":
        v = str(tok.value)
        if v in UNSUPPORTED:
            raise src.error(UNSUPPORTED[v], tok.line, tok.column)
        if v in RESERVED:
            raise src.error(f"`{v}` is a reserved word", tok.line, tok.column)
    return depth


# A string, a line comment or a block comment: what `_unclosed_comment` jumps between.
_OPENERS = re.compile(r'"|//|/\*')


def _unclosed_comment(src: Source) -> None:
    """An unterminated string or an unclosed block comment, located where it opens (the lexer
    would only say "unexpected character"). Jumps from opener to opener with `re` and
    `str.find` (a character loop in Python took 3 s on a 1 MiB comment)."""
    text = src.text
    i = 0
    while (m := _OPENERS.search(text, i)) is not None:
        j = m.start()
        if m.group() == '"':
            k = text.find('"', j + 1)
            nl = text.find("\n", j + 1)
            if k < 0 or (0 <= nl < k):
                raise src.error("unterminated string (a string ends with '\"' on the same line)", *_line_col(text, j))
            i = k + 1
        elif m.group() == "//":
            k = text.find("\n", j)
            i = len(text) if k < 0 else k
        else:
            k = text.find("*/", j + 2)
            if k < 0:
                raise src.error("unclosed block comment: '/*' without '*/'", *_line_col(text, j))
            i = k + 2


def _line_col(text: str, i: int) -> tuple[int, int]:
    """1-based line and column of character i (lines end at "\n" only, as the lexer counts)."""
    return text.count("\n", 0, i) + 1, i - (text.rfind("\n", 0, i) + 1) + 1


# K's step stage (docs/language.md §16 "The K spellings"): the words that start its items. Each is
# a name everywhere else, so the grammar declares a terminal for it that the lexer never produces.
K_STEP_WORDS = {"budget": "K_BUDGET", "chunk": "K_CHUNK", "cost": "K_COST", "memory": "K_MEMORY",
                "serve": "K_SERVE"}
class KStepWords:
    """Inside the braces of `stage E : step { … }`, a NAME that starts an item and is one of
    K_STEP_WORDS becomes that word's terminal, and in the `cost` item the keyword `tokens` becomes
    a NAME (K's bare engine value, read by the linker as `batch.tokens`). Outside the block every
    token passes unchanged, so `budget` stays an ordinary name there."""

    def __init__(self, src: Source) -> None:
        self.src = src
        self.braces = 0          # braces open inside the step block; 0: outside any
        self.item_start = False  # the next token starts an item
        self.in_cost = False     # inside the `cost` item, up to its `;`

    def rewrite(self, tokens: list[Token], i: int) -> Token:
        tok = tokens[i]
        t = tok.type
        if self.braces == 0:
            if t == "LBRACE" and i > 0 and tokens[i - 1].type == "STEP":
                self.braces, self.item_start = 1, True
            return tok
        start, self.item_start = self.item_start, False
        if t == "LBRACE":
            self.braces += 1
        elif t == "RBRACE":
            self.braces -= 1
            self.item_start = self.braces == 1
        elif t == "SEMICOLON" and self.braces == 1:
            self.item_start, self.in_cost = True, False
        elif start and t == "NAME" and str(tok.value) in K_STEP_WORDS:
            self.in_cost = tok.value == "cost"
            return Token.new_borrow_pos(K_STEP_WORDS[str(tok.value)], tok.value, tok)
        elif self.in_cost and t == "TOKENS":
            return Token.new_borrow_pos("NAME", tok.value, tok)
        return tok


# Tokens lexed ahead of the parser: the pre-scan of a token looks at the two after it.
_LOOKAHEAD = 2
# Tokens after a syntax error still pre-scanned (an out-of-scope keyword just after it wins).
_AFTER_ERROR = 8


def parse(text: str, file_id: int, src: Source) -> list[Node]:
    """Parse one file; raise SerqError located in `src`.

    One pass: each token is lexed, pre-scanned and fed to the LALR parser in turn, so the first
    error (out of scope, reserved, syntax) is reported as soon as it is reached — lexing a whole
    1 MiB file first, pre-scanning it, then parsing it again took 15 s to report a `;` on line
    1. The parse tree becomes nodes without recursion (a 3,000-term sum is 3,000 levels deep)."""
    _unclosed_comment(src)
    lk = _lark()
    ip = lk.parse_interactive(text)
    tokens: list[Token] = []
    fed = 0
    depth = 0
    # the parser's own lexer (`Lark.lex` builds a new scanner per call: 11 ms per file)
    lexed = ip.lexer_thread.lex(ip.parser_state)
    k_step = KStepWords(src)

    def syntax_error(e: UnexpectedToken) -> SerqError:
        """The error at token `fed`, unless the pre-scan refuses one of the next tokens: an
        out-of-scope construct often breaks the syntax a token or two before its keyword
        (`P.pull(…)` at the '.', `admit via` at `admit`), and its own message says more."""
        error = _token_error(src, tokens, e.token, _accepted(ip, e))
        try:
            while len(tokens) < fed + _AFTER_ERROR + _LOOKAHEAD and (tok := next(lexed, None)) is not None:
                tokens.append(tok)
        except UnexpectedCharacters:
            pass
        d = depth
        for i in range(fed, min(len(tokens), fed + _AFTER_ERROR)):
            d = _prescan_token(src, tokens, i, d)
        return error

    def feed(upto: int) -> None:
        nonlocal fed, depth
        while fed < upto:
            depth = _prescan_token(src, tokens, fed, depth)
            tokens[fed] = k_step.rewrite(tokens, fed)
            try:
                ip.feed_token(tokens[fed])
            except UnexpectedToken as e:
                raise syntax_error(e) from None
            fed += 1

    try:
        for tok in lexed:
            tokens.append(tok)
            if len(tokens) - fed > _LOOKAHEAD:
                feed(len(tokens) - _LOOKAHEAD)
    except UnexpectedCharacters as e:
        feed(len(tokens))  # an error before the bad character comes first
        c = text[e.pos_in_stream] if e.pos_in_stream < len(text) else "?"
        raise src.error(f"unexpected character {_char_desc(c)}", e.line, e.column) from None
    feed(len(tokens))
    try:
        tree = ip.feed_eof(tokens[-1] if tokens else None)
    except UnexpectedToken as e:
        raise syntax_error(e) from None
    try:
        nodes = _ToAst(file_id).transform(tree)
    except VisitError as e:
        if isinstance(e.orig_exc, SerqError):
            raise e.orig_exc from None
        raise
    _check_nesting(src, nodes)
    return nodes


def _check_nesting(src: Source, nodes: list[Node]) -> None:
    """Refuse, at the node where it happens, syntax nested more than MAX_NESTING nodes deep (a
    sum of MAX_NESTING terms, as many `else if`s or unary minuses): the linker and both engines
    walk expressions and statements recursively (docs/frontend.md "Limits")."""
    stack = [(n, 1) for n in nodes if isinstance(n, Node)]
    while stack:
        node, d = stack.pop()
        if d > MAX_NESTING:
            raise src.error(f"this is nested more than {MAX_NESTING} levels deep (an operator chain or `else if` "
                            f"chain counts one level per term; docs/frontend.md \"Limits\")", node.pos[1], node.pos[2])
        stack.extend((c, d + 1) for c in node.children())


def _accepted(ip, e: UnexpectedToken) -> set[str]:
    """The terminals the parser accepts where it failed: the exact set (LALR's default reductions
    make `e.expected` too wide)."""
    try:
        return set(ip.accepts()) or set(e.expected)
    except Exception:
        return set(e.expected)


def _k_item_word(prev: Token | None, tok: Token) -> str | None:
    """A K step stage's item word (`budget 3;`, `cost 1;`) written outside a step block, where it
    is a name: the word, when the unexpected token is the word itself or the value after it."""
    if tok.type == "NAME" and str(tok.value) in K_ITEM_WORDS:
        return str(tok.value)
    if prev is not None and prev.type == "NAME" and str(prev.value) in K_ITEM_WORDS and tok.type not in ("EQUAL", "LPAR"):
        return str(prev.value)
    return None


def _token_error(src: Source, tokens: list[Token], tok: Token, expected: set[str]) -> SerqError:
    if tok.type == "$END":
        line = max(1, len(src.lines))
        col = len(src.lines[-1]) + 1 if src.lines else 1
        prev = tokens[-1] if tokens else None
    else:
        line, col = tok.line, tok.column
        prev = None
        for t in tokens:
            if t.start_pos >= tok.start_pos:
                break
            prev = t
    expected = set(expected)
    raw = set(expected)
    closers = {"SEMICOLON", "RPAR", "RBRACE", "COMMA", "RSQB", "COLON", "LBRACE"}
    if expected & closers:
        expected = {e for e in expected if e not in _operators()}
    items = _describe_expected(expected)
    if "a statement" in items and "a name" in items:
        items.remove("a name")
    after = f" after {_show_token(prev)}" if prev is not None else ""
    if tok.type == "SHARE" and "a statement" in items:
        return src.error("`share …;` is an item of `fn main` (docs/language.md §11.14), not a statement: "
                         "write it beside the stages", line, col)
    if tok.type == "LEASE" and "a statement" in items:
        return src.error("`lease P (t)` follows the block of a hold of P (`hold P (u) { … } lease P (t);`, "
                         "docs/language.md §11.4) or is an item of an engine's request block; it is not a "
                         "statement", line, col)
    if tok.type != "NAME" and str(tok.value) in RESERVED and ("NAME" in expected or "a name" in items):
        return src.error(f"`{tok.value}` is a reserved word and cannot be used as a name", line, col)
    hint = ""
    if tok.type == "EQUAL" and "__ANON_4" in raw:
        hint = " (to compare, write '==')"
    elif tok.type in ("MAXMIN", "BOTTLENECK") and prev is not None and prev.type == "SHARE":
        hint = f" (`share {tok.value};` is an item of `fn main`, docs/language.md §11.14; a pool shares only its content)"
    elif (k_word := _k_item_word(prev, tok)) is not None:
        hint = (f" (`{k_word} …;` is an item of a K step stage, `stage E : step {{ … }}`, docs/language.md §16; "
                f"anywhere else `{k_word}` is a name)")
    elif tok.type == "NAME" and str(tok.value) in _P_HINTS:
        hint = f" ({_P_HINTS[str(tok.value)]})"
    elif prev is not None and prev.type == "NAME" and str(prev.value) in _P_HINTS:
        hint = f" ({_P_HINTS[str(prev.value)]})"
    if len(items) == 1:
        msg = f"expected {items[0]}{after}, found {_show_token(tok)}"
    else:
        msg = f"unexpected {_show_token(tok)}{after}: expected {_fmt_expected(items)}"
    return src.error(msg + hint, line, col)


# --------------------------------------------------------------------------------------------
# parse tree -> Node


def _s(tok: Any) -> str | None:
    return None if tok is None else str(tok)


@v_args(meta=True)
class _ToAst(Transformer_NonRecursive):
    def __init__(self, fid: int):
        super().__init__()
        self.fid = fid

    def p(self, meta) -> tuple:
        return (self.fid, getattr(meta, "line", 1), getattr(meta, "column", 1))

    def tp(self, tok: Token) -> tuple:
        return (self.fid, tok.line, tok.column)

    def name_node(self, tok: Token) -> Node:
        return Node("name", self.tp(tok), id=str(tok))

    # -- top level
    def start(self, meta, ch):
        return list(ch)

    def main_fn(self, meta, ch):
        return Node("main", self.p(meta), items=list(ch))

    def use_decl(self, meta, ch):
        return Node("use", self.p(meta), path=str(ch[0])[1:-1], path_pos=self.tp(ch[0]))

    def let_decl(self, meta, ch):
        return Node("let", self.p(meta), name=str(ch[0]), name_pos=self.tp(ch[0]), expr=ch[1])

    def names(self, meta, ch):
        return [(str(t), self.tp(t)) for t in ch]

    def def_expr(self, meta, ch):
        return Node("def", self.p(meta), name=str(ch[0]), params=ch[1] or [], body=ch[2], stmt=False)

    def def_stmts(self, meta, ch):
        return Node("def", self.p(meta), name=str(ch[0]), params=ch[1] or [], body=list(ch[2:]), stmt=True)

    def dim(self, meta, ch):
        return ch[0]

    # -- devices, engines
    def device_decl(self, meta, ch):
        return Node("device", self.p(meta), name=str(ch[0]), dim=ch[1], items=list(ch[2:]))

    def dev_fn(self, meta, ch):
        return Node("dev_fn", self.p(meta), name=str(ch[0]), params=ch[1] or [], body=ch[2])

    def dev_cap(self, meta, ch):
        return Node("cap", self.p(meta), name=str(ch[0]), expr=ch[1])

    def engine_decl(self, meta, ch):
        return Node("engine", self.p(meta), name=str(ch[0]), dim=ch[1], device=str(ch[2]),
                    device_pos=self.tp(ch[2]), member=ch[3], items=list(ch[4:]))

    def eng_cap(self, meta, ch):
        return Node("cap", self.p(meta), name=str(ch[0]), expr=ch[1])

    def eng_tokens(self, meta, ch):
        return Node("tokens", self.p(meta), expr=ch[0])

    def eng_speculate(self, meta, ch):
        return Node("eng_speculate", self.p(meta), slots=ch[0], lookahead=ch[1], limit=ch[2])

    def speculate(self, meta, ch):
        return Node("speculate", self.p(meta), drafts=ch[0])

    def eng_granule(self, meta, ch):
        return Node("granule", self.p(meta), expr=ch[0])

    def eng_lag(self, meta, ch):
        return Node("lag", self.p(meta), expr=ch[0])

    def eng_state(self, meta, ch):
        return Node("state", self.p(meta), name=str(ch[0]), expr=ch[1])

    def eng_request(self, meta, ch):
        return Node("request", self.p(meta), params=ch[0] or [], items=list(ch[1:]))

    def eng_schedule(self, meta, ch):
        lets = [c for c in ch if isinstance(c, Node) and c.kind == "slet"]
        stmts = [c for c in ch if not (isinstance(c, Node) and c.kind == "slet")]
        return Node("schedule", self.p(meta), lets=lets, stmts=stmts)

    def eng_execute(self, meta, ch):
        return Node("execute", self.p(meta), expr=ch[0])

    def req_admission(self, meta, ch):
        return Node("at_admission", self.p(meta), bindings=list(ch))

    def binding(self, meta, ch):
        return (str(ch[0]), self.tp(ch[0]), ch[1])

    hbind = binding

    def req_prefill(self, meta, ch):
        return Node("req_run", self.p(meta), mode="prefill", work=ch[0], growing=ch[1], speculate=ch[2])

    def req_decode(self, meta, ch):
        return Node("req_run", self.p(meta), mode="decode", work=ch[0], growing=ch[1], speculate=ch[2])

    def req_cache(self, meta, ch):
        return Node("req_cache", self.p(meta), expr=ch[0])

    def req_lease(self, meta, ch):
        return Node("req_lease", self.p(meta), ref=ch[0], time=ch[1])

    def req_eos(self, meta, ch):
        return Node("req_eos", self.p(meta), expr=ch[0])

    def growing(self, meta, ch):
        return ch[0]

    def sched_let(self, meta, ch):
        return Node("slet", self.p(meta), name=str(ch[0]), name_pos=self.tp(ch[0]), expr=ch[1])

    def s_advance(self, meta, ch):
        return Node("advance", self.p(meta), only=ch[0], order=ch[1], each=ch[2])

    def s_admit(self, meta, ch):
        return Node("admit", self.p(meta), only=ch[0], cond=ch[1], each=ch[2], taking=ch[3])

    def s_exclusive(self, meta, ch):
        return Node("exclusive", self.p(meta), each=ch[0])

    def s_branch(self, meta, ch):
        return Node("sbranch", self.p(meta), cond=ch[0], then=ch[1], els=ch[2] if ch[2] is not None else [])

    def s_else(self, meta, ch):
        c = ch[0]
        return c if isinstance(c, list) else [c]

    def s_body(self, meta, ch):
        return list(ch)

    def s_set(self, meta, ch):
        return Node("sset", self.p(meta), name=str(ch[0]), name_pos=self.tp(ch[0]), expr=ch[1])

    def only(self, meta, ch):
        return ch[0]

    def s_while(self, meta, ch):
        return ch[0]

    def each(self, meta, ch):
        return ch[0]

    def order_admission(self, meta, ch):
        return Node("order", self.p(meta), how="admission", keys=[])

    def order_decode_first(self, meta, ch):
        return Node("order", self.p(meta), how="decode_first", keys=[])

    def order_by(self, meta, ch):
        return Node("order", self.p(meta), how="by", keys=ch[0])

    def taking(self, meta, ch):
        takes = [c for c in ch[:-1]]
        return Node("taking", self.p(meta), takes=takes, reuse=ch[-1])

    def take(self, meta, ch):
        # the options after the units, in source order: the linker refuses one given twice
        return Node("take", self.p(meta), ref=ch[0], units=ch[1], opts=list(ch[2:]))

    hpool = take

    def reserve(self, meta, ch):
        return Node("reserve", self.p(meta), expr=ch[0])

    def content(self, meta, ch):
        return Node("content", self.p(meta), prefix=ch[0], length=ch[1], history=ch[2])

    def reuse(self, meta, ch):
        return ch[0]

    # -- pools, stages
    def pool_free(self, meta, ch):
        return Node("pool", self.p(meta), name=str(ch[0]), dim=ch[1], owner=None, owner_dev=None,
                    owner_pos=None, member=None, opts=list(ch[2:]))

    def pool_on(self, meta, ch):
        return Node("pool", self.p(meta), name=str(ch[0]), dim=ch[1], owner=str(ch[2]),
                    owner_pos=self.tp(ch[2]), member=ch[3], owner_dev=ch[4], opts=list(ch[5:]))

    def owner_dev(self, meta, ch):
        return (str(ch[0]), self.tp(ch[0]))

    def p_cap(self, meta, ch):
        return Node("p_cap", self.p(meta), expr=ch[0])

    def p_block(self, meta, ch):
        return Node("p_block", self.p(meta), expr=ch[0])

    def p_evict_lru(self, meta, ch):
        return Node("p_evict", self.p(meta), how="lru", keys=[])

    def p_evict_by(self, meta, ch):
        return Node("p_evict", self.p(meta), how="by", keys=ch[0])

    def p_preempt_none(self, meta, ch):
        return Node("p_preempt", self.p(meta), how="none", keys=[], requeue="head")

    def p_preempt_lifo(self, meta, ch):
        return Node("p_preempt", self.p(meta), how="lifo", keys=[], requeue="head")

    def p_preempt_by(self, meta, ch):
        return Node("p_preempt", self.p(meta), how="by", keys=ch[0], requeue=ch[1] or "head")

    def rq_head(self, meta, ch):
        return "head"

    def rq_tail(self, meta, ch):
        return "tail"

    def p_queue_fifo(self, meta, ch):
        return Node("p_queue", self.p(meta), how="fifo", keys=[])

    def p_queue_by(self, meta, ch):
        return Node("p_queue", self.p(meta), how="by", keys=ch[0])

    def p_reserve_held(self, meta, ch):
        return Node("p_reserve_held", self.p(meta))

    def p_share_content(self, meta, ch):
        return Node("p_share", self.p(meta))

    def p_admit_via(self, meta, ch):
        return Node("p_admit_via", self.p(meta), ref=ch[0])

    def p_spill(self, meta, ch):
        # `when` is parsed as a NAME (it is no reserved word); the linker checks the spelling
        return Node("p_spill", self.p(meta), tier=ch[0], link=ch[1], work=ch[2], word=str(ch[3]),
                    word_pos=self.tp(ch[3]), when=ch[4])

    def prefix_decl(self, meta, ch):
        return Node("prefix", self.p(meta), name=None, key=ch[0], length=ch[1], after=ch[2])

    def prefix_after(self, meta, ch):
        return ch[0]

    def stage_decl(self, meta, ch):
        return Node("stage", self.p(meta), name=str(ch[0]), dim=ch[1], skind=ch[2])

    # K's step stage (docs/language.md §16): its items as written; serq/kstep.py reads them as S
    def stage_step(self, meta, ch):
        return Node("kstep", self.p(meta), name=str(ch[0]), dim=ch[1], items=list(ch[2:]))

    def _k_item(word):
        def f(self, meta, ch):
            return Node("k_item", self.p(meta), word=word, expr=ch[1])
        return f

    k_budget = _k_item("budget")
    k_chunk = _k_item("chunk")
    k_cost = _k_item("cost")
    k_memory = _k_item("memory")

    def k_granule(self, meta, ch):
        return Node("k_item", self.p(meta), word="granule", expr=ch[0])

    k_state = eng_state   # `state r = v;`: the engine's register, as written in S

    def k_iteration(self, meta, ch):
        return Node("k_item", self.p(meta), word="iteration", stmts=ch[0])

    def k_serve(self, meta, ch):
        return Node("k_item", self.p(meta), word="serve", only=ch[1], order=ch[2], exclusive=False)

    def k_serve_exclusive(self, meta, ch):
        return Node("k_item", self.p(meta), word="serve", only=None, order=None, exclusive=True)

    def kind_fifo(self, meta, ch):
        return Node("kind", self.p(meta), how="fifo", expr=ch[0])

    def kind_ps(self, meta, ch):
        return Node("kind", self.p(meta), how="ps", expr=ch[0])

    def kind_delay(self, meta, ch):
        return Node("kind", self.p(meta), how="delay", expr=None)

    # -- workload, server, gauges
    def workload_decl(self, meta, ch):
        return Node("workload", self.p(meta), items=list(ch))

    def wl_arrive(self, meta, ch):
        return ch[0]

    def arr_poisson(self, meta, ch):
        return Node("arrive", self.p(meta), how="poisson", expr=ch[0])

    def arr_renewal(self, meta, ch):
        return Node("arrive", self.p(meta), how="renewal", expr=ch[0])

    def arr_closed(self, meta, ch):
        return Node("arrive", self.p(meta), how="closed", expr=ch[0])

    def arr_batch(self, meta, ch):
        return Node("arrive", self.p(meta), how="batch", expr=ch[0])

    def arr_none(self, meta, ch):
        return Node("arrive", self.p(meta), how="none", expr=None)

    def wl_trace(self, meta, ch):
        return Node("trace", self.p(meta), path=str(ch[0])[1:-1], ordered=ch[1] is not None)

    def ordered(self, meta, ch):
        return True

    def wl_hidden(self, meta, ch):
        return Node("hidden", self.p(meta), names=ch[0])

    def wl_init(self, meta, ch):
        return Node("wl_block", self.p(meta), which="init", body=ch[0])

    def wl_turn(self, meta, ch):
        return Node("wl_block", self.p(meta), which="turn", body=ch[0])

    def wl_session(self, meta, ch):
        return Node("wl_block", self.p(meta), which="session", body=ch[0])

    def server_decl(self, meta, ch):
        return Node("server", self.p(meta), body=ch[0])

    def gauge_decl(self, meta, ch):
        return Node("gauge", self.p(meta), name=str(ch[0]), expr=ch[1])

    def claim_decl(self, meta, ch):
        form = ch[2]
        return Node("claim", self.p(meta), name=str(ch[0]), name_pos=self.tp(ch[0]), given=ch[1],
                    form=form["form"], ref=form["ref"], expr=form["expr"])

    def claim_given(self, meta, ch):
        return ch[0]

    def claim_every(self, meta, ch):
        return {"form": "every", "ref": ch[0], "expr": ch[1]}

    def claim_some(self, meta, ch):
        return {"form": "some", "ref": ch[0], "expr": ch[1]}

    def claim_end(self, meta, ch):
        return {"form": "end", "ref": None, "expr": ch[0]}

    # -- statements
    def block(self, meta, ch):
        return list(ch)

    def turn_stmt(self, meta, ch):
        return Node("turn", self.p(meta))

    def end_stmt(self, meta, ch):
        return Node("end", self.p(meta))

    def set_stmt(self, meta, ch):
        return Node("set", self.p(meta), name=str(ch[0]), name_pos=self.tp(ch[0]), expr=ch[1])

    def observe_stmt(self, meta, ch):
        return Node("observe", self.p(meta), name=str(ch[0]), expr=ch[1])

    def accept_stmt(self, meta, ch):
        return Node("accept", self.p(meta), count=ch[0], rate=ch[1])

    def branch_stmt(self, meta, ch):
        return Node("branch", self.p(meta), cond=ch[0], coin=False, then=ch[1], els=ch[2])

    def branch_with(self, meta, ch):
        return Node("branch", self.p(meta), cond=ch[0], coin=True, then=ch[1], els=ch[2])

    def else_part(self, meta, ch):
        c = ch[0]
        return c if isinstance(c, list) else [c]

    def while_stmt(self, meta, ch):
        return Node("while", self.p(meta), cond=ch[0], body=ch[1])

    def loop_stmt(self, meta, ch):
        return Node("loop", self.p(meta), body=ch[0])

    def fork_stmt(self, meta, ch):
        return Node("fork", self.p(meta), body=ch[0])

    def join_stmt(self, meta, ch):
        return Node("join", self.p(meta))

    def choose_stmt(self, meta, ch):
        return Node("choose", self.p(meta), name=str(ch[0]), name_pos=self.tp(ch[0]), count=ch[1], keys=ch[2])

    def hold_stmt(self, meta, ch):
        pools = [c for c in ch if isinstance(c, Node) and c.kind == "take"]
        rest = ch[len(pools):]
        reuse, eos, adm, body, cache, lease = rest[0], rest[1], rest[2], rest[3], rest[4], rest[5]
        return Node("hold", self.p(meta), pools=pools, reuse=reuse, eos=eos, bindings=adm or [], body=body,
                    cache=cache, lease=lease)

    def hold_admission(self, meta, ch):
        return list(ch)

    def hold_eos(self, meta, ch):
        return ch[0]

    def hold_cache(self, meta, ch):
        return ch[0]

    def hold_lease(self, meta, ch):
        return Node("lease", self.p(meta), ref=ch[0], time=ch[1])

    def grow_stmt(self, meta, ch):
        return Node("grow", self.p(meta), ref=ch[0], units=ch[1])

    def drop_stmt(self, meta, ch):
        return Node("drop", self.p(meta), ref=ch[0])

    def release_stmt(self, meta, ch):
        return Node("release", self.p(meta), ref=ch[0])

    def load_stmt(self, meta, ch):
        return Node("load", self.p(meta), ref=ch[0], units=ch[1])

    def run_stmt(self, meta, ch):
        return Node("run", self.p(meta), ref=ch[0], mode=ch[1] or "plain", work=ch[2], growing=ch[3],
                    speculate=ch[4])

    def transfer_stmt(self, meta, ch):
        # ch: the link's stage references, then the work, the two pools and the amount
        return Node("transfer", self.p(meta), stages=list(ch[:-4]), work=ch[-4], src=ch[-3], dst=ch[-2], units=ch[-1])

    def flow_stmt(self, meta, ch):
        # ch: the stage references, then the mode, the work and `growing` (None where absent)
        return Node("flow", self.p(meta), refs=list(ch[:-3]), mode=ch[-3], work=ch[-2], growing=ch[-1])

    def share_maxmin(self, meta, ch):
        return Node("share", self.p(meta), policy="maxmin")

    def share_bottleneck(self, meta, ch):
        return Node("share", self.p(meta), policy="bottleneck")

    def mode_prefill(self, meta, ch):
        return "prefill"

    def mode_decode(self, meta, ch):
        return "decode"

    def tool_stmt(self, meta, ch):
        return Node("tool", self.p(meta), where=ch[0], work=ch[1])

    def tool_where(self, meta, ch):
        c = ch[0]
        if isinstance(c, Node) and (c.kind == "ref" or c.kind == "qref" and c.f.get("is_ref")):
            return ("on", c)
        return ("index", c)

    def call_stmt(self, meta, ch):
        c = ch[0]
        return Node("callstmt", self.p(meta), fname=c.fname, args=c.args, fname_pos=c.pos)

    def indexed_call_stmt(self, meta, ch):
        return Node("callstmt", self.p(meta), fname=str(ch[0]), args=ch[2] or [], fname_pos=self.tp(ch[0]),
                    index=ch[1])

    def pool_ref(self, meta, ch):
        if ch[2] is not None:  # `Q.m`, `Q[i].m`, `Q.m[j]`: a queue's member (serq/queues.py)
            member, mindex = ch[2]
            return Node("qref", self.tp(ch[0]), queue=str(ch[0]), qindex=ch[1], member=str(member),
                        member_pos=self.tp(member), mindex=mindex, is_ref=True)
        return Node("ref", self.tp(ch[0]), name=str(ch[0]), index=ch[1])

    def tool_ref(self, meta, ch):
        return Node("ref", ch[0].pos, name="tool", index=ch[1])

    def member_sel(self, meta, ch):
        return (ch[0], ch[1])

    def index(self, meta, ch):
        return ch[0]

    # -- queues (docs/language.md §11.16), lowered by serq/queues.py
    def queue_decl(self, meta, ch):
        return Node("queue", self.p(meta), name=str(ch[0]), name_pos=self.tp(ch[0]), dim=ch[1], role=str(ch[2]),
                    role_pos=self.tp(ch[2]), items=list(ch[3:]))

    def queue_role(self, meta, ch):
        return ch[0]   # a NAME, or the keyword `prefill` or `decode`

    def queue_call_stmt(self, meta, ch):
        return Node("qcall", self.p(meta), queue=str(ch[0]), queue_pos=self.tp(ch[0]), qindex=ch[1],
                    verb=str(ch[2]), verb_pos=self.tp(ch[2]), args=ch[3] or [], source=ch[4])

    def queue_call_single(self, meta, ch):
        return self.queue_call_stmt(meta, [ch[0], None, *ch[1:]])

    def queue_from(self, meta, ch):
        return Node("qsource", self.tp(ch[0]), queue=str(ch[0]), qindex=ch[1])

    # -- expressions
    def exprs(self, meta, ch):
        return list(ch)

    def cond(self, meta, ch):
        return Node("cond", self.p(meta), c=ch[0], a=ch[1], b=ch[2])

    def _bin(op):
        def f(self, meta, ch):
            return Node("bin", self.p(meta), op=op, a=ch[0], b=ch[1])
        return f

    or_ = _bin("||")
    and_ = _bin("&&")
    lt = _bin("<")
    le = _bin("<=")
    gt = _bin(">")
    ge = _bin(">=")
    eq = _bin("==")
    ne = _bin("!=")
    add = _bin("+")
    sub = _bin("-")
    mul = _bin("*")
    div = _bin("/")
    power = _bin("^")

    def neg(self, meta, ch):
        return Node("un", self.p(meta), op="neg", a=ch[0])

    def not_(self, meta, ch):
        return Node("un", self.p(meta), op="not", a=ch[0])

    def num(self, meta, ch):
        return Node("num", self.tp(ch[0]), text=str(ch[0]))

    def name(self, meta, ch):
        return self.name_node(ch[0])

    def tool_name(self, meta, ch):
        return self.name_node(ch[0])  # the stage `tool` named in an expression: `busy(tool)`

    def stage_name(self, meta, ch):
        return ch[0]  # a NAME, or the keyword `tool` naming the stage of `tool (z);`

    def indexed(self, meta, ch):
        return Node("indexed", self.tp(ch[0]), id=str(ch[0]), index=ch[1])

    def call(self, meta, ch):
        return Node("call", self.tp(ch[0]), fname=str(ch[0]), args=ch[1] or [])

    def call_min(self, meta, ch):
        return Node("call", self.p(meta), fname="min", args=ch[0] or [])

    def call_max(self, meta, ch):
        return Node("call", self.p(meta), fname="max", args=ch[0] or [])

    def call_queue(self, meta, ch):
        return Node("call", self.p(meta), fname="queue", args=ch[0] or [])

    def draw(self, meta, ch):
        return Node("draw", self.p(meta), dist=str(ch[0]), dist_pos=self.tp(ch[0]), args=ch[1] or [])

    def _agg(op):
        def f(self, meta, ch):
            return Node("agg", self.p(meta), op=op, var=str(ch[0]), count=str(ch[1]),
                        count_pos=self.tp(ch[1]), count_is_num=ch[1].type == "NUMBER", body=ch[2])
        return f

    agg_max = _agg("max")
    agg_min = _agg("min")
    agg_sum = _agg("sum")

    def ev_running(self, meta, ch):
        return Node("engval", self.p(meta), name="running." + str(ch[0]))

    def ev_waiting(self, meta, ch):
        return Node("engval", self.p(meta), name="waiting." + str(ch[0]))

    def ev_batch(self, meta, ch):
        return Node("engval", self.p(meta), name="batch." + str(ch[0]))

    def ev_batch_tokens(self, meta, ch):
        return Node("engval", self.p(meta), name="batch.tokens")

    def ctx_waiting(self, meta, ch):
        return Node("name", self.p(meta), id="waiting")

    def job_admission(self, meta, ch):
        return Node("name", self.p(meta), id="admission")

    def dotted(self, meta, ch):
        return Node("qref", self.tp(ch[0]), queue=str(ch[0]), qindex=None, member=str(ch[1]),
                    member_pos=self.tp(ch[1]), mindex=None)

    def member_indexed(self, meta, ch):
        return Node("qref", self.tp(ch[0]), queue=str(ch[0]), qindex=None, member=str(ch[1]),
                    member_pos=self.tp(ch[1]), mindex=ch[2])

    def queue_indexed(self, meta, ch):
        return Node("qref", self.tp(ch[0]), queue=str(ch[0]), qindex=ch[1], member=str(ch[2]),
                    member_pos=self.tp(ch[2]), mindex=None)

    def queue_def_call(self, meta, ch):
        return Node("qdefcall", self.tp(ch[0]), queue=str(ch[0]), qindex=None, fname=str(ch[1]),
                    fname_pos=self.tp(ch[1]), args=ch[2] or [])

    def queue_def_call_indexed(self, meta, ch):
        return Node("qdefcall", self.tp(ch[0]), queue=str(ch[0]), qindex=ch[1], fname=str(ch[2]),
                    fname_pos=self.tp(ch[2]), args=ch[3] or [])

    def args_call(self, meta, ch):
        return Node("args_call", self.tp(ch[0]), id=f"{ch[0]}.{ch[1]}", ext=str(ch[2])[1:-1],
                    ext_pos=self.tp(ch[2]), default=ch[3] if len(ch) > 3 else None, limits=list(ch[4:]))

    # an input's limits keep their tokens (`!input_limit`), so the error points at `in`, not `,`
    def limit_range(self, meta, ch):
        return Node("limit_range", self.tp(ch[1]), low=ch[2], high=ch[4])

    def limit_word(self, meta, ch):
        return Node("limit_word", self.tp(ch[1]), word=str(ch[1]))
