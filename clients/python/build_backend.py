"""A PEP 517 build backend for the paxlock package, standard library only.

pip builds a project in an isolated environment into which it installs
the backend's requirements from a package index; this backend has none,
so `pip install ./clients/python` works on a machine without one. It
builds a pure-Python wheel of the `paxlock` package and an sdist.
"""

import base64
import hashlib
import os
import tarfile
import zipfile

NAME = "paxlock"
VERSION = "0.1.0"
HERE = os.path.dirname(os.path.abspath(__file__))
DIST = f"{NAME}-{VERSION}"
METADATA = (
    "Metadata-Version: 2.1\n"
    f"Name: {NAME}\n"
    f"Version: {VERSION}\n"
    "Summary: Client of the paxlock lock service over its HTTP/JSON API\n"
    "Requires-Python: >=3.9\n"
    "License: Apache-2.0\n"
)
WHEEL = "Wheel-Version: 1.0\nGenerator: paxlock build_backend\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def _package_files():
    root = os.path.join(HERE, NAME)
    for dirpath, _, files in os.walk(root):
        for f in sorted(files):
            if f.endswith(".py"):
                full = os.path.join(dirpath, f)
                yield full, os.path.relpath(full, HERE).replace(os.sep, "/")


def _record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name = f"{DIST}-py3-none-any.whl"
    distinfo = f"{DIST}.dist-info"
    records = []
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for full, arc in _package_files():
            with open(full, "rb") as fh:
                data = fh.read()
            z.writestr(arc, data)
            records.append(_record_line(arc, data))
        for fname, text in (("METADATA", METADATA), ("WHEEL", WHEEL)):
            arc = f"{distinfo}/{fname}"
            z.writestr(arc, text)
            records.append(_record_line(arc, text.encode()))
        records.append(f"{distinfo}/RECORD,,")
        z.writestr(f"{distinfo}/RECORD", "\n".join(records) + "\n")
    return name


def build_sdist(sdist_directory, config_settings=None):
    name = f"{DIST}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for rel in ("pyproject.toml", "build_backend.py", "README.md"):
            t.add(os.path.join(HERE, rel), arcname=f"{DIST}/{rel}")
        for full, arc in _package_files():
            t.add(full, arcname=f"{DIST}/{arc}")
    return name
