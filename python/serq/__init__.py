"""serQ front-end: the language (lexer, parser, linker), its canonical IR, and the `serq` command."""

__version__ = "0.1.0"
