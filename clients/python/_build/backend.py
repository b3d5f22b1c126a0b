"""A PEP 517 build backend for the tenure package, standard library only.

The package is pure Python with no dependencies, and the machines it is
built on may have no network and no `wheel` package (setuptools before 70
needs it for bdist_wheel). This backend writes the wheel and the sdist
with zipfile and tarfile, from pyproject.toml's [project] table, so
`pip wheel --no-build-isolation --no-deps .`, `pip install .` and
`python3 -m build` work offline with any pip.
"""

import base64
import hashlib
import io
import os
import tarfile
import zipfile

try:
    import tomllib  # Python 3.11+
except ImportError:  # pragma: no cover - Python 3.9 and 3.10
    tomllib = None

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")
PACKAGE = "tenure"


def _project():
    path = os.path.join(ROOT, "pyproject.toml")
    if tomllib is not None:
        with open(path, "rb") as f:
            return tomllib.load(f)["project"]
    return _mini_toml_project(path)


def _mini_toml_project(path):
    """Reads the [project] table's simple keys (strings and lists of
    strings on one line), enough for this pyproject.toml on Python < 3.11."""
    import ast
    out, table = {}, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("["):
                table = line.strip("[]")
                continue
            if table != "project" or "=" not in line:
                continue
            k, v = (x.strip() for x in line.split("=", 1))
            try:
                out[k] = ast.literal_eval(v)
            except (ValueError, SyntaxError):
                pass
    return out


def _name_version():
    p = _project()
    return p["name"], p["version"]


def _metadata():
    p = _project()
    lines = ["Metadata-Version: 2.1", "Name: " + p["name"], "Version: " + p["version"]]
    if p.get("description"):
        lines.append("Summary: " + p["description"])
    if p.get("requires-python"):
        lines.append("Requires-Python: " + p["requires-python"])
    lic = p.get("license")
    if isinstance(lic, dict) and lic.get("text"):
        lines.append("License: " + lic["text"])
    for c in p.get("classifiers", []):
        lines.append("Classifier: " + c)
    readme = os.path.join(ROOT, "README.md")
    body = ""
    if os.path.exists(readme):
        lines.append("Description-Content-Type: text/markdown")
        with open(readme, encoding="utf-8") as f:
            body = f.read()
    return "\n".join(lines) + "\n\n" + body


def _wheel_file():
    return "Wheel-Version: 1.0\nGenerator: tenure-build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def _dist_info(name, version):
    return "%s-%s.dist-info" % (name.replace("-", "_"), version)


def _record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (path, digest, len(data))


def _package_files():
    base = os.path.join(SRC, PACKAGE)
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for fn in sorted(filenames):
            if fn.endswith(".py") or fn == "py.typed":
                full = os.path.join(dirpath, fn)
                yield os.path.relpath(full, SRC).replace(os.sep, "/"), full


def _write_wheel(wheel_directory, files):
    name, version = _name_version()
    di = _dist_info(name, version)
    wheel_name = "%s-%s-py3-none-any.whl" % (name.replace("-", "_"), version)
    records = []
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel_name), "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in files + [(di + "/METADATA", _metadata().encode()),
                                  (di + "/WHEEL", _wheel_file().encode())]:
            z.writestr(zipfile.ZipInfo(arc, date_time=(1980, 1, 1, 0, 0, 0)), data)
            records.append(_record_line(arc, data))
        records.append(di + "/RECORD,,")
        z.writestr(zipfile.ZipInfo(di + "/RECORD", date_time=(1980, 1, 1, 0, 0, 0)),
                   ("\n".join(records) + "\n").encode())
    return wheel_name


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    name, version = _name_version()
    di = os.path.join(metadata_directory, _dist_info(name, version))
    os.makedirs(di, exist_ok=True)
    with open(os.path.join(di, "METADATA"), "w", encoding="utf-8") as f:
        f.write(_metadata())
    with open(os.path.join(di, "WHEEL"), "w", encoding="utf-8") as f:
        f.write(_wheel_file())
    return os.path.basename(di)


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = []
    for arc, full in _package_files():
        with open(full, "rb") as f:
            files.append((arc, f.read()))
    return _write_wheel(wheel_directory, files)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    # A .pth file puts src/ on sys.path: edits take effect without a rebuild.
    return _write_wheel(wheel_directory, [("tenure_editable.pth", (SRC + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    name, version = _name_version()
    base = "%s-%s" % (name, version)
    out = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, out), "w:gz", format=tarfile.PAX_FORMAT) as t:
        for rel in ["pyproject.toml", "README.md", "_build/backend.py"]:
            t.add(os.path.join(ROOT, rel), arcname=base + "/" + rel)
        for arc, full in _package_files():
            t.add(full, arcname=base + "/src/" + arc)
        pkg_info = _metadata().encode()
        ti = tarfile.TarInfo(base + "/PKG-INFO")
        ti.size = len(pkg_info)
        t.addfile(ti, io.BytesIO(pkg_info))
    return out
