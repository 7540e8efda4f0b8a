"""serq_spec.backends(): "lean" is offered exactly when serq_lean says its library loads."""

from __future__ import annotations

import builtins
import sys
import types

import serq_spec


def fake_lean(monkeypatch, result):
    mod = types.ModuleType("serq_lean")
    mod.available = lambda: result
    monkeypatch.setitem(sys.modules, "serq_lean", mod)


def test_lean_listed_when_available(monkeypatch):
    fake_lean(monkeypatch, (True, "/x/libserqlang.so"))
    assert serq_spec.backends() == ["python", "lean"]


def test_python_only_when_lean_unavailable(monkeypatch):
    fake_lean(monkeypatch, (False, "not built; run lake build or set SERQ_LEAN_LIB"))
    assert serq_spec.backends() == ["python"]


def test_python_only_without_serq_lean(monkeypatch):
    monkeypatch.delitem(sys.modules, "serq_lean", raising=False)
    real_import = builtins.__import__

    def no_lean(name, *args, **kw):
        if name == "serq_lean" or name.startswith("serq_lean."):
            raise ImportError("No module named 'serq_lean'")
        return real_import(name, *args, **kw)
    monkeypatch.setattr(builtins, "__import__", no_lean)
    assert serq_spec.backends() == ["python"]


def test_python_only_when_available_raises(monkeypatch):
    mod = types.ModuleType("serq_lean")

    def boom():
        raise RuntimeError("broken install")
    mod.available = boom
    monkeypatch.setitem(sys.modules, "serq_lean", mod)
    assert serq_spec.backends() == ["python"]


def test_real_environment_is_consistent():
    import serq_lean
    expected = ["python", "lean"] if serq_lean.available()[0] else ["python"]
    assert serq_spec.backends() == expected
