"""serQ's differential harness: the one comparison (`compare`) by which two implementations of the
same semantics are held against each other, and the runners that use it (README.md in this folder
lists the pairs, what each compares and where it runs)."""
