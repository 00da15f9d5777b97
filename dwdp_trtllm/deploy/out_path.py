"""The one check of an output path a user names (`--out DIR`, `--plot FILE`), before anything is written.

Every command that writes calls `check_out_dir` / `check_out_file` with the flag's text. Refused, as a ConfigError
naming the flag (one line, exit 2): an empty path; a name that is not UTF-8 (a shell passes any bytes; Python
carries the undecodable ones as surrogates, which every text the commands write, such as commands.sh, cannot
encode); a name too long for the filesystem; a symbolic link loop; a
dangling symbolic link (creating it would make its target's directories, outside the named path); a file
(or anything not a directory) where a directory must be; a directory where a file must be; a place this process
cannot write. The check itself creates nothing; a command then creates only the named path.
Pure apart from reading the filesystem (lstat / stat / access).
"""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from ..spec.schema import ConfigError

#: Linux limits (limits.h): bytes of one name, bytes of a whole path
NAME_MAX = 255
PATH_MAX = 4096


def _refuse(flag: str, text: str, why: str) -> ConfigError:
    return ConfigError(text or None, flag, why)


def _writable(d: str) -> bool:
    return os.access(d, os.W_OK | os.X_OK)


def _check(text: str | os.PathLike | None, flag: str, want_dir: bool) -> Path:
    if text is None or not str(text).strip():
        raise _refuse(flag, "", f"expected a {'directory' if want_dir else 'file'} path, got an empty string")
    text = os.fspath(text)
    raw = os.fsencode(text)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise _refuse(flag, ascii(text), f"expected a path of UTF-8 characters, got the bytes {raw!r}: rename it "
                                         "with UTF-8 characters only") from None
    longest = max((len(c) for c in raw.split(b"/")), default=0)
    if longest > NAME_MAX or len(raw) > PATH_MAX:
        raise _refuse(flag, text[:80] + "...", f"name too long ({len(raw)} bytes, its longest part {longest}): at most "
                                               f"{NAME_MAX} bytes per name and {PATH_MAX} per path")
    full = os.path.join(os.getcwd(), text) if not os.path.isabs(text) else text
    parts = [p for p in full.split("/") if p]
    prefix, last_dir = "/", "/"
    for i, part in enumerate(parts):
        prefix = os.path.join(prefix, part)
        final = i == len(parts) - 1
        try:
            st = os.lstat(prefix)
        except FileNotFoundError:
            if not _writable(last_dir):
                raise _refuse(flag, text, f"cannot write {text}: cannot create {prefix} in {last_dir} "
                                          "(not writable by this user)") from None
            return Path(text)  # the rest is created by the command, inside the named path
        except OSError as e:
            raise _refuse(flag, text, f"cannot read {prefix} ({e.strerror})") from None
        if os.path.islink(prefix):
            try:
                target_is_dir = os.path.isdir(os.path.realpath(prefix, strict=True))
            except OSError as e:
                if e.errno == errno.ELOOP:
                    raise _refuse(flag, text, f"{prefix} is a symbolic link loop") from None
                raise _refuse(flag, text, f"{prefix} is a dangling symbolic link (to {os.readlink(prefix)}): writing "
                                          "through it would create directories outside the named path; remove it or "
                                          "point it at an existing directory") from None
            if target_is_dir:
                last_dir = prefix
                continue
            st = os.stat(prefix)
        if stat.S_ISDIR(st.st_mode):
            last_dir = prefix
            continue
        if not final:
            raise _refuse(flag, text, f"{prefix} is a file, not a directory")
        if want_dir:
            raise _refuse(flag, text, f"{prefix} is a file; expected a directory (or a path to create)")
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(flag, text, f"{prefix} is not a regular file; expected a file name to write")
        if not os.access(prefix, os.W_OK) or not _writable(last_dir):
            raise _refuse(flag, text, f"cannot write {text} (not writable by this user)")
        return Path(text)
    if not want_dir:
        raise _refuse(flag, text, f"{text} is a directory; expected a file name such as {os.path.join(text, 'plan.png')}")
    if not _writable(prefix):
        raise _refuse(flag, text, f"cannot write {text}: the directory is not writable by this user")
    return Path(text)


def check_out_dir(text: str | os.PathLike | None, flag: str = "--out") -> Path:
    """The directory `text` names, checked (module doc); it may not exist yet. Raises ConfigError naming `flag`."""
    return _check(text, flag, want_dir=True)


def check_out_file(text: str | os.PathLike | None, flag: str, *, suffixes: tuple[str, ...] = ()) -> Path:
    """The file `text` names, checked (module doc), with one of `suffixes` when given (lower-case, with the dot)."""
    if suffixes and text is not None and str(text).strip() and Path(text).suffix.lower() not in suffixes:
        if os.path.isdir(text):
            _check(text, flag, want_dir=False)  # "is a directory" says more than the suffix
        names = ", ".join(suffixes[:-1]) + (" or " if len(suffixes) > 1 else "") + suffixes[-1]
        raise ConfigError(None, flag, f"expected a {names} file name, got {os.fspath(text)!r}")
    return _check(text, flag, want_dir=False)
