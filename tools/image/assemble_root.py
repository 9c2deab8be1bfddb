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

import json
import os
import py_compile
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

# The interpreter, its standard library, and the time zone data zoneinfo reads (Django, UTC).
ROOTS = ("python3.11-minimal", "libpython3.11-stdlib", "tzdata")
# Dependencies that are package machinery or configuration prompts, never needed at run time,
# and the libraries of standard-library modules the operator never imports (readline, curses,
# dbm, nis: terminals, Berkeley DB, NIS with its RPC and Kerberos libraries; ~5 MB). Their
# extension modules are left out below; importing one raises ImportError.
EXCLUDED_PACKAGES = frozenset(
    {
        "debconf", "perl-base", "dpkg", "readline-common", "libc-bin", "sensible-utils",
        "libreadline8", "libncursesw6", "libtinfo6", "libdb5.3", "libnsl2", "libtirpc3",
    }
)
DYNLOAD = "/usr/lib/python3.11/lib-dynload/"
EXCLUDED_EXTENSIONS = (
    "readline", "_curses", "_curses_panel", "_dbm", "nis",
    # CPython's own test helpers and examples
    "_testcapi", "_testbuffer", "_testclinic", "_testinternalcapi", "_testmultiphase",
    "_testimportmultiple", "_xxtestfuzz", "_ctypes_test", "xxlimited", "xxlimited_35",
    "_xxsubinterpreters", "audioop", "ossaudiodev",
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
    "/usr/lib/python3.11/test/",
    "/usr/lib/python3.11/config-3.11-x86_64-linux-gnu/",
    # glibc's iconv converters (8 MB): CPython's codecs are its own and never call iconv.
    "/usr/lib/x86_64-linux-gnu/gconv/",
)
ZONEINFO = "/usr/share/zoneinfo/"
KEPT_ZONES = ("UTC", "Etc/")  # Django's TIME_ZONE and Celery's timezone are UTC
SITE = "usr/local/lib/python3.11/dist-packages"
# Parts of the installed wheels the operator never loads: kubernetes' asyncio client (42 MB;
# the operator uses the synchronous one, and its aiohttp stack is left out of the lock), the
# synchronous client's API classes but those the operator calls (16 MB; the client imports
# each lazily, on first use; tests/tooling/test_image_root.py checks the list against the
# code), and Django's translations but English (LANGUAGE_CODE en-us; 30 MB).
PRUNED = ("kubernetes/aio",)
KUBERNETES_API_DIR = "kubernetes/client/api"
KEPT_KUBERNETES_APIS = frozenset(
    {
        "__init__.py",
        "apiextensions_v1_api.py",  # ApiextensionsV1Api: the served-CRD check (S8.7)
        "apps_v1_api.py",  # AppsV1Api: rollouts of opted-in workloads (S6)
        "authorization_v1_api.py",  # AuthorizationV1Api: access reviews
        "coordination_v1_api.py",  # CoordinationV1Api: the Lease (S4.1.5)
        "core_v1_api.py",  # CoreV1Api: Secrets, events, namespaces, TokenRequest
        "custom_objects_api.py",  # CustomObjectsApi: HikyoSecret, HikyoInstance, rollouts
    }
)
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
    if path.startswith(DYNLOAD):
        return path.removeprefix(DYNLOAD).split(".")[0] not in EXCLUDED_EXTENSIONS
    if path.startswith(ZONEINFO):
        return path.removeprefix(ZONEINFO).startswith(KEPT_ZONES)
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
    for module in (site / KUBERNETES_API_DIR).iterdir():
        if module.name not in KEPT_KUBERNETES_APIS:
            module.unlink()
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


# What the operator and a worker import (run_operator, the dashboard, migrations, Celery's
# worker on Redis, PostgreSQL), on top of every module of our own packages.
WARM_IMPORTS = (
    "controlplane.urls",
    "django.core.management.commands.migrate",
    "django.contrib.admin.templatetags.admin_list",
    "django.db.backends.sqlite3.base",
    "django.db.backends.postgresql.base",
    "celery.bin.celery",
    "celery.apps.worker",
    "celery.worker.consumer",
    "celery.concurrency.prefork",
    "kombu.transport.redis",
    "cheroot.wsgi",
    "whitenoise.middleware",
    # The kubernetes client loads these on first use, not at import.
    *(
        f"kubernetes.client.api.{name.removesuffix('.py')}"
        for name in sorted(KEPT_KUBERNETES_APIS - {"__init__.py"})
    ),
)
OUR_PACKAGES = ("controlplane", "workers", "k8s", "hikyo")
WARM_SCRIPT = """
import importlib, json, pkgutil, sys
import django
django.setup()
for package in {packages!r}:
    root = importlib.import_module(package)
    for info in pkgutil.walk_packages(root.__path__, package + "."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)
for name in {modules!r}:
    importlib.import_module(name)
files = {{getattr(module, "__file__", None) or "" for module in list(sys.modules.values())}}
print(json.dumps(sorted(files)))
"""


def imported_sources(rootfs: Path) -> list[Path]:
    """The .py files (in ``rootfs``) of every module the operator and a worker import at
    start, found by importing them with this interpreter, the image's own, on rootfs's
    packages."""
    site = rootfs / SITE
    script = WARM_SCRIPT.format(packages=OUR_PACKAGES, modules=WARM_IMPORTS)
    with tempfile.TemporaryDirectory() as data:
        env = {
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": str(site),
            "PYTHONDONTWRITEBYTECODE": "1",
            "DJANGO_SETTINGS_MODULE": "controlplane.settings",
            "HIKYO_OPERATOR_DATA_DIR": data,
        }
        done = subprocess.run(
            [sys.executable, "-S", "-c", script],
            env=env, check=True, capture_output=True, text=True, timeout=300,
        )
    sources = []
    for name in json.loads(done.stdout.splitlines()[-1]):
        if not name.endswith(".py"):
            continue  # extension modules, namespace packages
        path = Path(name)
        if path.is_relative_to(rootfs):
            sources.append(path)
        elif (rootfs / path.relative_to("/")).is_file():
            sources.append(rootfs / path.relative_to("/"))  # the stdlib, the same files
    return sorted(set(sources))


def compile_imported(rootfs: Path) -> int:
    """Bytecode for the modules imported at start, and only those (~1,900 of ~6,000 files).

    Without it each start compiles them in memory: the embedded operator then idles at
    ~195 MB RSS instead of ~125 MB (the chart's limit is 128 MiB), and starts slower. All of
    the .pyc would add ~67 MB to the image. unchecked-hash: no source mtime in the file
    (reproducible) and no re-validation (the root is read-only). The paths compiled into the
    code objects are the image's, not /rootfs's."""
    sources = imported_sources(rootfs)
    for source in sources:
        py_compile.compile(
            str(source),
            dfile="/" + str(source.relative_to(rootfs)),
            doraise=True,
            invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
        )
    return len(sources)


def normalize(rootfs: Path, epoch: int) -> None:
    """Every mtime at ``epoch``; group/other write bits only on /tmp."""
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
    for cache in sorted(rootfs.rglob("__pycache__"), reverse=True):
        shutil.rmtree(cache)  # none from pip (--no-compile); only ours below
    compile_imported(rootfs)
    normalize(rootfs, epoch)


if __name__ == "__main__":
    main(sys.argv)
