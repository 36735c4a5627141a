"""Python source files of this machine that may be used to train a redistributable model.

Sources: the standard library (PSF-2.0) and every installed distribution whose metadata declares a
permissive licence (MIT, BSD, Apache-2.0, PSF, ISC, ...) and nothing copyleft or proprietary. The
licence text is read from each distribution's metadata at run time and recorded with its version,
file count and bytes. Files are deduplicated by content, and split into training and held-out sets
by a hash of their name, so the split does not depend on which other files exist.
"""
import hashlib
import os
import sys
import sysconfig

PERMISSIVE = ("MIT", "BSD", "Apache", "PSF", "Python Software Foundation", "ISC", "Zlib", "Unlicense", "CC0")
REFUSED = ("GPL", "MPL", "Mozilla", "EPL", "Eclipse", "Proprietary", "proprietary", "Commercial", "NVIDIA", "Other/")
MAX_FILE_BYTES = 400_000
HELDOUT_ONE_IN = 50


def licence_of(md):
    """The licence a distribution declares, or None when it is not (only) permissive."""
    declared = [md.get("License-Expression") or "", (md.get("License") or "").strip()]
    declared += [c for c in md.get_all("Classifier") or [] if c.startswith("License ::")]
    text = " | ".join(d.splitlines()[0] for d in declared if d and len(d.splitlines()[0]) < 200)
    if not any(k in text for k in PERMISSIVE) or any(k in text for k in REFUSED):
        return None
    return text


def stdlib_files():
    root = sysconfig.get_paths()["stdlib"]
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in ("site-packages", "dist-packages", "__pycache__"))
        out += [os.path.join(dirpath, f) for f in sorted(filenames) if f.endswith(".py")]
    return out


def walk_py(root):
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        out += [os.path.join(dirpath, f) for f in sorted(filenames) if f.endswith(".py")]
    return out


def distribution_files(dist):
    """The distribution's .py files from its RECORD, else from its top-level packages (installs
    without a RECORD, such as Debian's)."""
    out = []
    if dist.files is not None:
        for f in dist.files:
            if str(f).endswith(".py"):
                path = str(dist.locate_file(f))
                if os.path.isfile(path):
                    out.append(path)
        return sorted(out)
    import importlib.util
    for name in (dist.read_text("top_level.txt") or "").split():
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is None:
            continue
        if spec.submodule_search_locations:
            for root in spec.submodule_search_locations:
                out += walk_py(root)
        elif spec.origin and spec.origin.endswith(".py"):
            out.append(spec.origin)
    return sorted(set(out))


def sources(per_source_cap, total_cap):
    """[(manifest entry, [(name, path)])] in a fixed order, each source under per_source_cap bytes."""
    from importlib import metadata
    found = [({"name": "python-stdlib", "version": sys.version.split()[0], "licence": "PSF-2.0"}, stdlib_files())]
    dists = {}
    for d in metadata.distributions():
        name = (d.metadata.get("Name") or "").lower()
        if name and name not in dists:
            dists[name] = d
    for name in sorted(dists):
        lic = licence_of(dists[name].metadata)
        if lic:
            found.append(({"name": name, "version": dists[name].version, "licence": lic},
                          distribution_files(dists[name])))
    seen, out, total = set(), [], 0
    for entry, paths in found:
        kept, size = [], 0
        for i, path in enumerate(paths):
            n = os.path.getsize(path)
            if n == 0 or n >= MAX_FILE_BYTES or size + n > per_source_cap or total + n > total_cap:
                continue
            with open(path, "rb") as f:
                digest = hashlib.sha1(f.read()).hexdigest()
            if digest in seen:
                continue
            seen.add(digest)
            kept.append((f"{entry['name']}/{os.path.basename(path)}:{i}", path))
            size += n
        total += size
        if kept:
            out.append((dict(entry, num_files=len(kept), bytes=size), kept))
    return out


def split(files):
    train, heldout = [], []
    for rel, path in files:
        bucket = int(hashlib.sha1(rel.encode()).hexdigest(), 16) % HELDOUT_ONE_IN
        (heldout if bucket == 0 else train).append((rel, path))
    return train, heldout


def read_texts(files):
    out = []
    for _, path in files:
        with open(path, encoding="utf-8", errors="replace") as f:
            out.append(f.read())
    return out
