"""The C header model both code generators read: codegen/generate.py (cuda.h) and
codegen/generate_nvml.py (nvml.h).

libclang parses the header; this module turns its function declarations into Func and Param
records and answers what the generators' rules ask of a C type: is it a scalar, an opaque handle
(a pointer to an incomplete struct), a struct with no pointer or handle anywhere inside, which
values may an enum hold; and it reads the names a header gives its enums' values, with the one
table of them both generators write (gen/cuda_enums.gen.h, gen/nvml_enums.gen.h). The rules
themselves (what may be marshalled, and how) stay in each generator: the two APIs differ (cuda.h's
annotations and size expressions, NVML's count/array pairs and its refusal to forward calls that
change the GPU).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import clang.cindex as ci

SCALAR_KINDS = {
    ci.TypeKind.BOOL, ci.TypeKind.CHAR_U, ci.TypeKind.UCHAR, ci.TypeKind.CHAR16, ci.TypeKind.CHAR32,
    ci.TypeKind.USHORT, ci.TypeKind.UINT, ci.TypeKind.ULONG, ci.TypeKind.ULONGLONG,
    ci.TypeKind.CHAR_S, ci.TypeKind.SCHAR, ci.TypeKind.WCHAR, ci.TypeKind.SHORT, ci.TypeKind.INT,
    ci.TypeKind.LONG, ci.TypeKind.LONGLONG, ci.TypeKind.FLOAT, ci.TypeKind.DOUBLE, ci.TypeKind.ENUM,
}
INTEGRAL_KINDS = SCALAR_KINDS - {ci.TypeKind.FLOAT, ci.TypeKind.DOUBLE}


class GenError(Exception):
    """The input (header, annotations, op ids) cannot be generated from; the message says where."""


@dataclass
class Param:
    index: int  # 1-based, as in coverage reasons
    name: str
    type: ci.Type
    decl: str  # "CUdeviceptr *dptr", as the header writes it


@dataclass
class Func:
    name: str
    params: list
    result: str
    mode: str = "generated"  # generated | local | custom | unsupported (custom: cuda.h only)
    reason: str = ""  # why a call is unsupported, for the coverage report
    wrap: bool = False  # marshaller emitted as rgpu_fwd_<name>; the exported entry is hand-written


def gcc_include() -> str:
    try:
        return subprocess.check_output(["gcc", "-print-file-name=include"], text=True).strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def parse_header(path: Path, prefix: str, defines: list[str], includes: list[str] = (),
                 func_cls=Func, param_cls=Param) -> dict:
    """Every function whose name starts with prefix that the header itself declares (not the
    headers it includes), parsed as C with -D for each of defines; the first declaration of a
    name wins. func_cls and param_cls are the generator's own subclasses of Func and Param."""
    args = ["-x", "c"] + [f"-D{d}" for d in defines] + [f"-I{path.parent}"] + [f"-I{i}" for i in includes]
    inc = gcc_include()
    if inc:
        args.append(f"-I{inc}")
    tu = ci.Index.create().parse(str(path), args=args)
    errors = [d for d in tu.diagnostics if d.severity >= ci.Diagnostic.Error]
    if errors:
        raise GenError(f"{path}: does not parse:\n" + "\n".join(str(d) for d in errors))
    funcs: dict = {}
    real = os.path.realpath(path)
    for cur in tu.cursor.get_children():
        if cur.kind != ci.CursorKind.FUNCTION_DECL or not cur.spelling.startswith(prefix):
            continue
        if cur.location.file is None or os.path.realpath(cur.location.file.name) != real:
            continue
        if cur.spelling in funcs:  # a redeclaration: the first one wins
            continue
        params = []
        for i, a in enumerate(cur.get_arguments(), 1):
            name = a.spelling or f"arg{i}"
            params.append(param_cls(i, name, a.type, declare(a.type.spelling, name)))
        funcs[cur.spelling] = func_cls(cur.spelling, params, cur.result_type.spelling)
    if not funcs:
        raise GenError(f"{path}: declares no {prefix}* functions")
    return funcs


def declare(spelling: str, name: str) -> str:
    """A parameter's declaration as C writes it: `T *name`, `T name[4]`, `R (*name)(A)`."""
    if "(*)" in spelling:
        return spelling.replace("(*)", f"(*{name})", 1)
    if "[" in spelling:
        i = spelling.index("[")
        return f"{spelling[:i].rstrip()} {name}{spelling[i:]}"
    if spelling.endswith("*") and not name.startswith("/*"):
        return f"{spelling}{name}"
    return f"{spelling} {name}"


def unqual(spelling: str) -> str:
    """A type's spelling without its outer const/volatile."""
    s = spelling.strip()
    while s.startswith("const ") or s.startswith("volatile "):
        s = s.split(" ", 1)[1]
    for q in (" const", " volatile"):
        if s.endswith(q):
            s = s[: -len(q)]
    return s


def is_handle(t: ci.Type) -> bool:
    """A pointer to an incomplete struct (CUstream = struct CUstream_st *, nvmlDevice_t)."""
    c = t.get_canonical()
    if c.kind != ci.TypeKind.POINTER:
        return False
    p = c.get_pointee()
    return p.kind == ci.TypeKind.RECORD and p.get_declaration().get_definition() is None


def is_scalar(t: ci.Type) -> bool:
    return t.get_canonical().kind in SCALAR_KINDS


def plain_record(t: ci.Type, seen=frozenset()) -> bool:
    """A struct/union with no pointer and no handle anywhere inside (fixed arrays of such are fine)."""
    c = t.get_canonical()
    if c.kind != ci.TypeKind.RECORD:
        return False
    decl = c.get_declaration().get_definition()
    if decl is None:
        return False
    if decl.hash in seen:
        return True
    fields = list(c.get_fields())
    return bool(fields) and all(plain_member(f.type, seen | {decl.hash}) for f in fields)


def plain_member(t: ci.Type, seen) -> bool:
    c = t.get_canonical()
    if c.kind in SCALAR_KINDS:
        return True
    if c.kind == ci.TypeKind.CONSTANTARRAY:
        return plain_member(c.element_type, seen)
    return c.kind == ci.TypeKind.RECORD and plain_record(c, seen)


def plain(t: ci.Type) -> bool:
    """A scalar or a plain struct: bytes that mean the same on both ends."""
    return is_scalar(t) or plain_record(t)


def enum_range(t: ci.Type) -> tuple[int | None, int | None] | None:
    """For an enum type, the values a C++ program may hold in it: the smallest two's-complement
    bit-field that fits every enumerator. The server refuses other values from the wire before
    they become an enum (holding one is undefined behaviour). (lo, hi): None where the
    underlying type's own bound is the tighter one; None for a type that is not an enum."""
    c = t.get_canonical()
    if c.kind != ci.TypeKind.ENUM:
        return None
    values = [ch.enum_value for ch in c.get_declaration().get_children()
              if ch.kind == ci.CursorKind.ENUM_CONSTANT_DECL]
    if not values:
        return None
    lo, hi = min(values), max(values)
    ut = c.get_declaration().enum_type.get_canonical()
    size = ut.get_size() * 8
    unsigned = ut.kind in (ci.TypeKind.UINT, ci.TypeKind.ULONG, ci.TypeKind.ULONGLONG, ci.TypeKind.USHORT,
                           ci.TypeKind.UCHAR)
    type_lo, type_hi = (0, (1 << size) - 1) if unsigned else (-(1 << (size - 1)), (1 << (size - 1)) - 1)
    bits = 1
    if lo >= 0:
        while hi >= (1 << bits):
            bits += 1
        r_lo, r_hi = 0, (1 << bits) - 1
    else:
        while hi >= (1 << (bits - 1)) or lo < -(1 << (bits - 1)):
            bits += 1
        r_lo, r_hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    # Only the bounds tighter than the underlying type's own need checking.
    return (r_lo if r_lo > type_lo else None, r_hi if r_hi < type_hi else None)


def parse_enums(path: Path, wanted: list[str], args: list[str]) -> dict[str, list[tuple[int, str]]]:
    """The constants of each typedef'd enum in wanted that the header declares, by the typedef's name."""
    inc = gcc_include()
    tu = ci.Index.create().parse(str(path), args=args + ([f"-I{inc}"] if inc else []))
    out: dict[str, list[tuple[int, str]]] = {}
    for cur in tu.cursor.get_children():
        if cur.kind != ci.CursorKind.TYPEDEF_DECL or cur.spelling not in wanted or cur.spelling in out:
            continue
        decl = cur.underlying_typedef_type.get_canonical().get_declaration()
        if decl.kind != ci.CursorKind.ENUM_DECL:
            continue
        out[cur.spelling] = [(c.enum_value, c.spelling) for c in decl.get_children()
                             if c.kind == ci.CursorKind.ENUM_CONSTANT_DECL]
    return {w: out[w] for w in wanted if w in out}


def emit_enum_names(enums: dict[str, list[tuple[int, str]]], banner: str, header: str, namespace: str) -> str:
    """A header of constexpr (value, name) tables, one per enum, and a lookup by value."""
    lines = [f"// {banner}\n//\n// The names {header} gives the values of its enums, in its order (the first name of a\n"
             "// value is the one it gives first), for traces and tests/conformance: k<enum type>[].",
             "#pragma once\n", "#include <cstddef>", "#include <cstdint>\n", f"namespace {namespace} {{\n",
             "struct EnumName {", "  int64_t value;", "  const char* name;", "};\n",
             "template <size_t N>",
             "constexpr const char* enum_name(const EnumName (&table)[N], int64_t value) {",
             "  for (const EnumName& e : table)", "    if (e.value == value) return e.name;", "  return nullptr;", "}\n"]
    for name, consts in enums.items():
        lines.append(f"inline constexpr EnumName k{name}[] = {{")
        lines += [f"    {{{v}, \"{c}\"}}," for v, c in consts]
        lines.append("};")
    lines.append(f"\n}}  // namespace {namespace}")
    return "\n".join(lines) + "\n"
