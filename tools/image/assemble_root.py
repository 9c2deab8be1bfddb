"""Assembles the runtime root filesystem of the operator image from the build stage's Debian.

Run by the Containerfile's build stage (Debian bookworm with python3, as root):

    python3 tools/image/assemble_root.py /rootfs

It copies into /rootfs the files of the Debian packages the interpreter needs at run time
(python3.11's dependency closure from dpkg's own database, minus documentation, shells and
package tools), adds the users, /tmp and the data directory, and sets every mtime to
SOURCE_DATE_EPOCH so two builds of one commit give the same layer. The Python packages are
installed into /rootfs by pip before this runs (the Containerfile) and are left as they are.

Why not the whole debootstrap root: minbase with python3 is ~300 MB (apt, dpkg, perl, bash,
coreutils); the runtime needs none of it, S8.3 wants no shell, and the image aims under 150 MB.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

# The interpreter, its standard library, and the time zone data zoneinfo reads (Django, UTC).
ROOTS = ("python3.11-minimal", "libpython3.11-stdlib", "tzdata")
# Dependencies that are package machinery or configuration prompts, never needed at run time.
EXCLUDED_PACKAGES = frozenset(
    {"debconf", "perl-base", "dpkg", "readline-common", "libc-bin", "sensible-utils"}
)
# Paths from those packages the operator never uses: docs, manuals, translations, programs
# other than python, and standard-library parts for development (IDLE, 2to3, ensurepip).
EXCLUDED_PREFIXES = (
    "/usr/share/doc/",
    "/usr/share/man/",
    "/usr/share/info/",
    "/usr/share/locale/",
    "/usr/share/lintian/",
    "/usr/share/bug/",
    "/usr/share/applications/",
    "/usr/share/pixmaps/",
    "/usr/share/binfmts/",
    "/usr/sbin/",
    "/sbin/",
    "/etc/",
    "/usr/lib/python3.11/ensurepip/",
    "/usr/lib/python3.11/idlelib/",
    "/usr/lib/python3.11/lib2to3/",
    "/usr/lib/python3.11/turtledemo/",
    "/usr/lib/python3.11/pydoc_data/",
    "/usr/lib/python3.11/config-3.11-x86_64-linux-gnu/",
)
SITE = "usr/local/lib/python3.11/dist-packages"
# Parts of the installed wheels the operator never loads: kubernetes' asyncio client (42 MB;
# the operator uses the synchronous one, and its aiohttp stack is left out of the lock) and
# Django's translations but English (LANGUAGE_CODE en-us; 30 MB).
PRUNED = ("kubernetes/aio",)
LOCALE_DIRS = ("django/conf/locale", "django/contrib/*/locale")
KEPT_LOCALES = frozenset({"en", "__init__.py"})
KEPT_PROGRAMS = frozenset({"/usr/bin/python3.11"})
# Merged /usr, as Debian bookworm lays it out (dpkg still lists some files under /lib).
MERGED = {"bin": "usr/bin", "lib": "usr/lib", "lib64": "usr/lib64", "sbin": "usr/sbin"}
USER_ID = 65532  # S8.3 runAsUser / runAsGroup
DATA_DIR = "var/lib/hikyo-operator"  # HIKYO_OPERATOR_DATA_DIR: SQLite, an emptyDir/tmpfs
PASSWD = (
    "root:x:0:0:root:/root:/usr/sbin/nologin\n"
    f"nonroot:x:{USER_ID}:{USER_ID}::/tmp:/usr/sbin/nologin\n"
)
GROUP = f"root:x:0:\nnonroot:x:{USER_ID}:\n"
TIMEOUT = 60  # seconds for one dpkg-query


def dpkg_query(*args: str) -> str:
    return subprocess.run(
        ["dpkg-query", *args], check=True, capture_output=True, text=True, timeout=TIMEOUT
    ).stdout


def installed() -> set[str]:
    return set(dpkg_query("-W", "-f=${Package}\n").split())


def depends(package: str) -> list[list[str]]:
    """The package's Pre-Depends and Depends as alternatives, architecture and version dropped."""
    raw = dpkg_query("-W", "-f=${Pre-Depends}, ${Depends}", package)
    groups = []
    for group in raw.split(","):
        names = [re.split(r"[\s:(]", alt.strip(), maxsplit=1)[0] for alt in group.split("|")]
        names = [name for name in names if name]
        if names:
            groups.append(names)
    return groups


def closure(roots: tuple[str, ...], present: set[str]) -> list[str]:
    """The run-time package set: the roots and what they depend on, the first installed
    alternative of each choice, minus the excluded packages."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        package = todo.pop()
        if package in seen or package in EXCLUDED_PACKAGES:
            continue
        seen.add(package)
        for alternatives in depends(package):
            chosen = next((name for name in alternatives if name in present), None)
            if chosen is None:
                raise SystemExit(f"{package}: none of {alternatives} is installed")
            todo.append(chosen)
    return sorted(seen)


def wanted(path: str) -> bool:
    if path.startswith(EXCLUDED_PREFIXES):
        return False
    if path.startswith(("/usr/bin/", "/bin/")):
        return path in KEPT_PROGRAMS
    return True


def copy_packages(packages: list[str], rootfs: Path) -> None:
    for name, target in MERGED.items():
        (rootfs / target).mkdir(parents=True, exist_ok=True)
        (rootfs / name).symlink_to(target)
    for package in packages:
        for path in dpkg_query("-L", package).splitlines():
            source = Path(path)
            if path.lstrip("/") in MERGED or (source.is_dir() and not source.is_symlink()):
                continue  # directories come with the files in them; the merged links are made
            if not wanted(path) or not (source.exists() or source.is_symlink()):
                continue  # excluded, or a dpkg-diverted or removed path
            # Resolve the parent through the merged-/usr links, keep the file itself as it is.
            destination = rootfs / os.path.realpath(source.parent).lstrip("/") / source.name
            if destination.is_symlink() or destination.exists():
                continue  # listed twice (through /lib and /usr/lib)
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination, follow_symlinks=False)
    # `python` for the entrypoint (`python -m ...`), as Debian's python-is-python3 names it.
    (rootfs / "usr/bin/python").symlink_to("python3.11")
    (rootfs / "usr/bin/python3").symlink_to("python3.11")


def prune(rootfs: Path) -> None:
    site = rootfs / SITE
    for part in PRUNED:
        shutil.rmtree(site / part)
    for pattern in LOCALE_DIRS:
        for locale in site.glob(pattern):
            for entry in locale.iterdir():
                if entry.name not in KEPT_LOCALES:
                    if entry.is_dir():
                        shutil.rmtree(entry)
                    else:
                        entry.unlink()


def add_system_files(rootfs: Path) -> None:
    etc = rootfs / "etc"
    etc.mkdir(exist_ok=True)
    (etc / "passwd").write_text(PASSWD)
    (etc / "group").write_text(GROUP)
    # The dynamic linker's cache for the copied libraries (ldconfig reads /etc/ld.so.conf*).
    shutil.copytree("/etc/ld.so.conf.d", etc / "ld.so.conf.d")
    shutil.copy2("/etc/ld.so.conf", etc / "ld.so.conf")
    subprocess.run(["ldconfig", "-r", str(rootfs)], check=True, timeout=TIMEOUT)
    tmp = rootfs / "tmp"
    tmp.mkdir(exist_ok=True)
    tmp.chmod(0o1777)
    data = rootfs / DATA_DIR
    data.mkdir(parents=True, exist_ok=True)
    os.chown(data, USER_ID, USER_ID)


def normalize(rootfs: Path, epoch: int) -> None:
    """No bytecode: every mtime at ``epoch``; group/other write bits only on /tmp.

    No .pyc files: compiling the standard library and the packages here would add ~67 MB
    (the image would pass 200 MB) to save ~17 MB of RSS and some start time; with a read-only
    root the modules are compiled in memory at each start instead.
    """
    for cache in sorted(rootfs.rglob("__pycache__"), reverse=True):
        shutil.rmtree(cache)
    for path in [rootfs, *rootfs.rglob("*")]:
        if not path.is_symlink() and path != rootfs / "tmp":
            mode = path.stat().st_mode
            path.chmod(stat.S_IMODE(mode) & ~0o022)
        os.utime(path, (epoch, epoch), follow_symlinks=False)


def main(argv: list[str]) -> None:
    rootfs = Path(argv[1])
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH") or "0")
    copy_packages(closure(ROOTS, installed()), rootfs)
    prune(rootfs)
    add_system_files(rootfs)
    normalize(rootfs, epoch)


if __name__ == "__main__":
    main(sys.argv)
