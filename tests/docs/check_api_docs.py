#!/usr/bin/env python3
"""docs-coverage: fails when a public name in include/lazygraph/ has no doc comment.

Usage: check_api_docs.py DOXYFILE [DOXYGEN]

DOXYFILE is the API reference's configuration (docs/Doxyfile, configured by Meson): the check sees exactly the
names the reference shows. Public means declared in namespace `lazygraph` outside `lazygraph::detail` and
`lazygraph::nn::detail` (which the Doxyfile excludes), and not private: classes, structs, concepts, functions, variables, type aliases,
enums and their enumerators, friends, members. Deleted members and destructors are exempt, as doxygen's own
warnings exempt them: a deleted member's signature says it all, and what destroying does belongs in the
class's description. Doxygen runs twice into a temporary directory (under a second each); nothing is written
next to the sources or into the build's docs/:

1. As configured, with WARN_IF_UNDOCUMENTED=YES: its "is not documented" warnings, and any other warning
   (a `\\param` naming no parameter, `\\param`s that cover only some parameters, an unknown command) fail the
   check.
2. With EXTRACT_ALL=YES and XML output, which lists every public name, documented or not: a name with neither
   a brief nor a detailed description fails. This catches what doxygen 1.9 does not warn about: undocumented
   C++20 concepts (it just leaves them out of the reference) and enumerators.

WARN_NO_PARAMDOC stays NO: the style is a short sentence that names the parameters in passing; a `\\param`
line for every `stream` and `size` would be filler. Parameters that do get a `\\param` are still checked
against the signature (WARN_IF_DOC_ERROR).

Exit status: 0 when everything is documented, 1 with the list otherwise, 77 (skipped) without doxygen.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

# The check fails loudly, rather than passing vacuously, when these are not all seen (a wrong INPUT, an
# EXCLUDE_SYMBOLS that swallows the public namespace, a doxygen that cannot parse the headers).
EXPECTED = ["lazygraph::DeviceOp", "lazygraph::GraphNode", "lazygraph::Module", "lazygraph::Scope",
            "lazygraph::CudaGraph", "lazygraph::DeviceBuffer", "lazygraph::Device", "lazygraph::KernelLibrary"]

WARNING = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+): warning: (?P<text>.*)$")
UNDOCUMENTED = re.compile(r"^(?:Compound (?P<compound>.+?)|Member (?P<member>.+?) \((?P<kind>\w+)\) of "
                          r"(?P<scope>.+?)) is not documented\.$")


def run_doxygen(doxygen, doxyfile_text, overrides, log):
    config = doxyfile_text + "\n" + "".join(f"{key} = {value}\n" for key, value in overrides.items())
    result = subprocess.run([doxygen, "-"], input=config, text=True, capture_output=True)
    if result.returncode != 0:
        sys.exit(f"docs-coverage: doxygen failed ({result.returncode}):\n{result.stdout}{result.stderr}")
    with open(log, encoding="utf-8") as f:
        return f.read()


def parse_warnings(text):
    """(file, line, text) per warning; continuation lines (indented) join the warning they follow."""
    warnings = []
    for line in text.splitlines():
        m = WARNING.match(line)
        if m:
            warnings.append([m["file"], int(m["line"]), m["text"]])
        elif line.startswith(("warning: ", "error: ")):  # about the configuration, not a place in a header
            warnings.append(["Doxyfile", 0, line])
        elif warnings and line.strip():
            warnings[-1][2] += " " + line.strip()
    return [tuple(w) for w in warnings]


def has_doc(element):
    for tag in ("briefdescription", "detaileddescription"):
        node = element.find(tag)
        if node is not None and "".join(node.itertext()).strip():
            return True
    return False


def is_public_name(name):
    return (name == "lazygraph" or name.startswith("lazygraph::")) and not re.match(r"lazygraph(::nn)?::detail\b", name)


def undocumented_in_xml(xml_dir):
    """(file, line, description) for every public compound, member and enumerator without documentation."""
    missing, seen = [], set()
    index = ET.parse(os.path.join(xml_dir, "index.xml")).getroot()
    for entry in index.findall("compound"):
        if entry.get("kind") not in ("namespace", "class", "struct", "union", "concept"):
            continue
        root = ET.parse(os.path.join(xml_dir, entry.get("refid") + ".xml")).getroot()
        compound = root.find("compounddef")
        name = compound.findtext("compoundname")
        if not is_public_name(name) or compound.get("prot") == "private":
            continue
        seen.add(name)
        location = compound.find("location")
        if not has_doc(compound):
            missing.append((location.get("file"), int(location.get("line")), f"{compound.get('kind')} {name}"))
        for member in compound.iter("memberdef"):
            if member.get("prot") == "private":
                continue
            kind = member.get("kind")
            if kind == "friend" and (member.findtext("type") or "").strip() in ("class", "struct"):
                continue  # `friend class X;` grants access; it declares nothing a user calls
            args = member.findtext("argsstring") or ""
            if member.findtext("name").startswith("~") or re.search(r"=\s*delete$", args):
                continue  # as doxygen's warnings: a deleted member says all in its signature, and what a
                #           destructor does (waits? frees?) belongs in its class's description
            where = member.find("location")
            qualified = f"{name}::{member.findtext('name')}"
            if not has_doc(member):
                missing.append((where.get("file"), int(where.get("line")),
                                f"{kind} {qualified}{args}"))
            for value in member.findall("enumvalue"):
                if value.get("prot") != "private" and not has_doc(value):
                    missing.append((where.get("file"), int(where.get("line")),
                                    f"enumerator {qualified}::{value.findtext('name')}"))
    return missing, seen


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    doxyfile = sys.argv[1]
    doxygen = sys.argv[2] if len(sys.argv) == 3 and sys.argv[2] else shutil.which("doxygen")
    if not doxygen:
        print("docs-coverage skipped: doxygen is not installed (Debian: apt-get install doxygen)")
        return 77
    with open(doxyfile, encoding="utf-8") as f:
        doxyfile_text = f.read()
    # STRIP_FROM_PATH is <source root>/include: doxygen's XML gives paths below it, its warnings full paths.
    include_dir = re.search(r"^STRIP_FROM_PATH\s*=\s*(.*?)\s*$", doxyfile_text, re.M)[1]
    source_root = os.path.dirname(include_dir)

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="lazygraph-docs-") as tmp:
        warnings_log = os.path.join(tmp, "warnings.txt")
        warnings = parse_warnings(run_doxygen(doxygen, doxyfile_text, {
            # Some output is needed: doxygen checks `\param` names only while writing one (XML is the quickest).
            "OUTPUT_DIRECTORY": tmp, "GENERATE_HTML": "NO", "GENERATE_XML": "YES", "XML_OUTPUT": "xml-warnings",
            "GENERATE_LATEX": "NO",
            "WARN_IF_UNDOCUMENTED": "YES", "WARN_IF_DOC_ERROR": "YES", "WARN_LOGFILE": warnings_log,
            "QUIET": "YES"}, warnings_log))
        xml_log = os.path.join(tmp, "xml-warnings.txt")
        run_doxygen(doxygen, doxyfile_text, {
            "OUTPUT_DIRECTORY": tmp, "EXTRACT_ALL": "YES", "GENERATE_HTML": "NO", "GENERATE_XML": "YES",
            "XML_OUTPUT": "xml", "GENERATE_LATEX": "NO", "INLINE_INHERITED_MEMB": "NO", "WARN_LOGFILE": xml_log,
            "QUIET": "YES"}, xml_log)
        xml_missing, seen = undocumented_in_xml(os.path.join(tmp, "xml"))
    elapsed = time.monotonic() - started

    def rel(path):
        return os.path.relpath(path if os.path.isabs(path) else os.path.join(include_dir, path), source_root)

    absent = [name for name in EXPECTED if name not in seen]
    if absent:
        print(f"docs-coverage: doxygen did not see {', '.join(absent)}: check INPUT and EXCLUDE_SYMBOLS in "
              f"{doxyfile}")
        return 1

    undocumented, others = set(), set()
    for file, line, text in warnings:
        m = UNDOCUMENTED.match(text)
        if m:
            if m["compound"]:
                what = f"compound {m['compound']}"
            else:
                what = f"{m['kind']} {m['scope'].split(' ', 1)[-1]}::{m['member']}"
            undocumented.add((rel(file), line, what))
        else:
            others.add((rel(file), line, text))
    warned_at = {(file, line) for file, line, _ in undocumented}
    # Names doxygen's warnings missed (concepts, ...): the XML lists them, the warnings did not.
    undocumented |= {(rel(file), line, what) for file, line, what in xml_missing if (rel(file), line) not in warned_at}

    if not undocumented and not others:
        print(f"docs-coverage: every public name is documented ({len(seen)} namespaces, classes and concepts "
              f"checked in {elapsed:.1f} s)")
        return 0
    if undocumented:
        print(f"docs-coverage: {len(undocumented)} public names have no doc comment "
              f"(add a `///` line before each; names in lazygraph::detail and lazygraph::nn::detail are exempt):")
        for file, line, what in sorted(undocumented):
            print(f"  {file}:{line}: {what}")
    if others:
        print(f"docs-coverage: {len(others)} other doxygen warnings:")
        for file, line, text in sorted(others):
            print(f"  {file}:{line}: {text}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
