"""The PEP 517 build backend of sandboxd-client, standard library only.

pip builds a package in an isolated environment into which it installs the
backend's requirements from an index; with setuptools as the backend, an
offline ``pip install clients/python`` fails there. This backend needs
nothing: it writes the wheel (the ``sandboxd_client`` package as it is,
pure Python) and the sdist itself, with the metadata of pyproject.toml's
``[project]`` table (the few plain ``key = "value"`` lines it uses).
"""
from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile
from typing import Any, Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "sandboxd_client"
Settings = Dict[str, Any]


def _project() -> Dict[str, str]:
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    table = re.search(r"^\[project\]\n(.*?)(?=^\[|\Z)", text, re.S | re.M)
    if not table:
        raise RuntimeError("pyproject.toml has no [project] table")
    fields = dict(re.findall(r'^([a-z-]+) = "([^"]*)"$', table.group(1), re.M))
    for key in ("name", "version", "description", "requires-python"):
        if key not in fields:
            raise RuntimeError(f"pyproject.toml's [project] lacks {key}")
    return fields


def _dist_name(p: Dict[str, str]) -> str:
    return re.sub(r"[-_.]+", "_", p["name"]).lower()


def _metadata(p: Dict[str, str]) -> str:
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {p['name']}",
        f"Version: {p['version']}",
        f"Summary: {p['description']}",
        f"Requires-Python: {p['requires-python']}",
    ]
    readme = os.path.join(ROOT, "README.md")
    body = ""
    if os.path.exists(readme):
        lines.append("Description-Content-Type: text/markdown")
        with open(readme, encoding="utf-8") as f:
            body = f.read()
    return "\n".join(lines) + "\n\n" + body


def _package_files() -> List[Tuple[str, str]]:
    """(path in the archive, path on disk) of the package, sorted."""
    out = []
    pkg = os.path.join(ROOT, PACKAGE)
    for dirpath, dirnames, filenames in os.walk(pkg):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith((".py", ".typed")):
                disk = os.path.join(dirpath, name)
                out.append((os.path.relpath(disk, ROOT).replace(os.sep, "/"), disk))
    return out


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"{name},sha256={digest.decode()},{len(data)}"


def _dist_info(p: Dict[str, str]) -> Dict[str, bytes]:
    return {
        "METADATA": _metadata(p).encode(),
        "WHEEL": b"Wheel-Version: 1.0\nGenerator: sandboxd_build\n"
                 b"Root-Is-Purelib: true\nTag: py3-none-any\n",
    }


def _write_wheel(wheel_directory: str, members: List[Tuple[str, bytes]]) -> str:
    p = _project()
    dist = _dist_name(p)
    info = f"{dist}-{p['version']}.dist-info"
    files = list(members)
    files += [(f"{info}/{k}", v) for k, v in _dist_info(p).items()]
    record = [_record_line(n, d) for n, d in files] + [f"{info}/RECORD,,"]
    files.append((f"{info}/RECORD", ("\n".join(record) + "\n").encode()))
    wheel = f"{dist}-{p['version']}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel), "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files:
            zi = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    return wheel


# PEP 517 hooks.

def get_requires_for_build_wheel(config_settings: Optional[Settings] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[Settings] = None) -> List[str]:
    return []


get_requires_for_build_editable = get_requires_for_build_wheel


def prepare_metadata_for_build_wheel(metadata_directory: str,
                                     config_settings: Optional[Settings] = None) -> str:
    p = _project()
    info = f"{_dist_name(p)}-{p['version']}.dist-info"
    os.makedirs(os.path.join(metadata_directory, info), exist_ok=True)
    for k, v in _dist_info(p).items():
        with open(os.path.join(metadata_directory, info, k), "wb") as f:
            f.write(v)
    return info


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory: str, config_settings: Optional[Settings] = None,
                metadata_directory: Optional[str] = None) -> str:
    members = []
    for name, disk in _package_files():
        with open(disk, "rb") as f:
            members.append((name, f.read()))
    return _write_wheel(wheel_directory, members)


def build_editable(wheel_directory: str, config_settings: Optional[Settings] = None,
                   metadata_directory: Optional[str] = None) -> str:
    """PEP 660: a wheel whose .pth puts this source tree on sys.path."""
    return _write_wheel(wheel_directory, [(f"{PACKAGE}.pth", (ROOT + "\n").encode())])


def build_sdist(sdist_directory: str, config_settings: Optional[Settings] = None) -> str:
    p = _project()
    base = f"{_dist_name(p)}-{p['version']}"
    names = ["pyproject.toml", "README.md", "_build/sandboxd_build.py"]
    files = [(n, os.path.join(ROOT, n)) for n in names if os.path.exists(os.path.join(ROOT, n))]
    files += _package_files()
    out = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, out), "w:gz", format=tarfile.PAX_FORMAT) as t:
        pkg_info = _metadata(p).encode()
        ti = tarfile.TarInfo(f"{base}/PKG-INFO")
        ti.size, ti.mode = len(pkg_info), 0o644
        t.addfile(ti, io.BytesIO(pkg_info))
        for name, disk in files:
            ti = t.gettarinfo(disk, f"{base}/{name}")
            ti.uid = ti.gid = 0
            ti.uname = ti.gname = ""
            with open(disk, "rb") as f:
                t.addfile(ti, f)
    return out
