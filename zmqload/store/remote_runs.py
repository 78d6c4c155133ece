"""Run directories on a filesystem named by a URI (s3://, gs://, hdfs://: pyarrow.fs): the URI told
from a path, shown without secrets, opened and proven writable in bounded time, run directories
copied up or down and checked file by file (docs/ARCHITECTURE.md, "Runs at a URI")."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Optional

from ..errors import ConfigError
from ..contract.uris import URI_ACCEPTED, join, scrubbed, without_secrets

# pyarrow's S3 client retries a failed request with backoff and has no timeout of its own:
# unbounded against a host that drops packets, 6 s against a refused connection (measured,
# pyarrow 26). Every S3 filesystem opened here has these bounds instead.
S3_CONNECT_TIMEOUT_S = 5.0
S3_REQUEST_TIMEOUT_S = (
    10.0  # the AWS SDK's: the longest wait for the next bytes, not a whole transfer
)
PROBE_ATTEMPTS = 2  # before a run: refused within about 2 x (connect + request) seconds
COPY_ATTEMPTS = 4  # a copy rides out a brief outage


@dataclass
class Remote:
    """A directory on a filesystem named by URI: the filesystem (pyarrow.fs.FileSystem) and the
    path inside it, as FileSystem.from_uri splits them."""

    uri: str
    fs: Any  # pyarrow.fs.FileSystem (pyarrow has no type information)
    path: str

    @property
    def without_secrets(self) -> str:
        return without_secrets(self.uri)

    def child(self, name: str) -> Remote:
        return Remote(join(self.uri, name), self.fs, f"{self.path.rstrip('/')}/{name}")

    def why(self, exc: BaseException) -> str:
        """An error of the filesystem's client in one line, without the URI's secrets."""
        return scrubbed(str(exc) or exc.__class__.__name__, self.uri)


def open_remote(uri: str, option: str, attempts: int = COPY_ATTEMPTS) -> Remote:
    """The filesystem and path of `uri`, its client's waits bounded (S3: timeouts and `attempts`);
    ConfigError(option) when pyarrow cannot open it (an unknown scheme, a malformed URI)."""
    import pyarrow.fs as pafs

    try:
        fs, path = pafs.FileSystem.from_uri(uri)
    except (ValueError, OSError, TypeError) as exc:  # ArrowInvalid is a ValueError
        raise ConfigError(
            option,
            f"cannot open {without_secrets(uri)!r} ({scrubbed(str(exc), uri)}); accepted: "
            f"{URI_ACCEPTED}",
        ) from None
    if isinstance(fs, pafs.S3FileSystem):
        fs = _bounded_s3(fs, attempts)
    return Remote(uri, fs, path.rstrip("/"))


def _bounded_s3(fs: Any, attempts: int) -> Any:
    """The same S3 filesystem (every option from_uri read from the URI) with bounded waits."""
    import pyarrow.fs as pafs

    _, (options,) = fs.__reduce__()
    # from_uri reports options it was not given as '' (or a proxy without a scheme): unset them,
    # as an empty access key would replace the environment's credentials
    options = {
        k: v
        for k, v in options.items()
        if v != "" and not (k == "proxy_options" and not (v or {}).get("scheme"))
    }
    options.update(
        connect_timeout=S3_CONNECT_TIMEOUT_S,
        request_timeout=S3_REQUEST_TIMEOUT_S,
        retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=attempts),
    )
    return pafs.S3FileSystem(**options)


def check_writable(uri: str, option: str, new_child: Optional[str] = None) -> Remote:
    """Before a run: `uri` opened, a small object written there, read back by its size and removed,
    and `new_child` (the run's directory) not there yet. ConfigError(option) otherwise, in bounded
    time: the check writes nothing that stays."""
    import secrets

    remote = open_remote(uri, option, attempts=PROBE_ATTEMPTS)
    probe = f"{remote.path}/.zmqload-write-check-{secrets.token_hex(4)}"
    try:
        with remote.fs.open_output_stream(probe) as f:
            f.write(b"zmqload")
        written = remote.fs.get_file_info(probe).size
        remote.fs.delete_file(probe)
        taken = new_child is not None and _exists(remote.child(new_child))
    except (OSError, ValueError) as exc:
        raise ConfigError(
            option,
            f"cannot write to {remote.without_secrets!r} ({remote.why(exc)}); accepted: {URI_ACCEPTED}, "
            "whose bucket or directory exists and takes writes",
        ) from None
    if written != len(b"zmqload"):
        raise ConfigError(
            option,
            f"{remote.without_secrets!r} kept {written} of 7 bytes written; accepted: {URI_ACCEPTED}",
        )
    if taken:
        raise ConfigError(
            "--run-name",
            f"{remote.child(new_child or '').without_secrets} already exists; accepted: a new run name",
        )
    return remote


def _exists(remote: Remote) -> bool:
    import pyarrow.fs as pafs

    if remote.fs.get_file_info(remote.path).type != pafs.FileType.NotFound:
        return True
    return bool(
        remote.fs.get_file_info(
            pafs.FileSelector(remote.path, allow_not_found=True, recursive=False)
        )
    )


def file_sizes(fs: Any, path: str) -> dict[str, int]:
    """Every file under `path` (relative name -> bytes; a file itself: "" -> bytes); {} where
    there is nothing."""
    import pyarrow.fs as pafs

    itself = fs.get_file_info(path)
    if itself.type == pafs.FileType.File:
        return {"": itself.size}
    found = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True, recursive=True))
    return {
        os.path.relpath(i.path, path).replace(os.sep, "/"): i.size
        for i in found
        if i.type == pafs.FileType.File
    }


def copy_checked(source_fs: Any, source: str, destination_fs: Any, destination: str) -> int:
    """Every file under `source` (or the file `source`) copied to `destination`, then each found
    there with its size; the bytes copied. OSError naming the first file missing or short."""
    import pyarrow.fs as pafs

    wanted = file_sizes(source_fs, source)
    pafs.copy_files(
        source,
        destination,
        source_filesystem=source_fs,
        destination_filesystem=destination_fs,
        use_threads=True,
    )
    found = file_sizes(destination_fs, destination)
    for name, size in sorted(wanted.items()):
        if found.get(name) != size:
            raise OSError(
                f"{name or os.path.basename(source)}: {size:,} bytes copied, {'none' if name not in found else f'{found[name]:,}'} "
                "found after the copy"
            )
    return sum(wanted.values())


def upload(local_dir: str, remote: Remote) -> int:
    """A finished local run directory made the same at `remote` and checked (copy_checked); the
    bytes copied. A file already there with its size is not copied again (a placed run's tasks
    copied the workers' files up: runner/task_out.py), and what is there but not here is removed
    (the maps and spill the driver read and removed). run.json goes last, once everything else is
    there and checked: a directory holding it is a run (run_record.RUN_FILE), so a copy cut short
    never reads as a whole run."""
    import pyarrow.fs as pafs

    from ..contract.run_record import RUN_FILE

    here, local_dir = pafs.LocalFileSystem(), os.path.abspath(local_dir)
    there = _listing(remote)
    there_sizes = {
        name: info.size for name, info in there.items() if info.type == pafs.FileType.File
    }
    local_sizes = file_sizes(here, local_dir)
    copied = 0
    for entry in sorted(os.listdir(local_dir)):
        if entry == RUN_FILE:
            continue
        wanted = {name: size for name, size in local_sizes.items() if _under(name, entry)}
        missing = sorted(name for name, size in wanted.items() if there_sizes.get(name) != size)
        if not missing:
            continue
        if not any(_under(name, entry) for name in there):  # the whole entry in one copy
            copied += copy_checked(
                here, os.path.join(local_dir, entry), remote.fs, f"{remote.path}/{entry}"
            )
            continue
        for parent in sorted({os.path.dirname(name) for name in missing}):
            remote.fs.create_dir(f"{remote.path}/{parent}", recursive=True)
        copied += sum(
            copy_checked(here, os.path.join(local_dir, name), remote.fs, f"{remote.path}/{name}")
            for name in missing
        )
    _remove_extra(remote, there, local_dir, set(local_sizes))
    if os.path.exists(os.path.join(local_dir, RUN_FILE)):
        copied += copy_checked(
            here, os.path.join(local_dir, RUN_FILE), remote.fs, f"{remote.path}/{RUN_FILE}"
        )
    return copied


def _under(name: str, entry: str) -> bool:
    return name == entry or name.startswith(entry + "/")


def _listing(remote: Remote) -> dict[str, Any]:
    """Everything under `remote`, files and directories: relative name -> FileInfo."""
    import pyarrow.fs as pafs

    found = remote.fs.get_file_info(
        pafs.FileSelector(remote.path, allow_not_found=True, recursive=True)
    )
    return {os.path.relpath(i.path, remote.path).replace(os.sep, "/"): i for i in found}


def _remove_extra(
    remote: Remote, there: dict[str, Any], local_dir: str, local_files: set[str]
) -> None:
    """What is at `remote` but not in `local_dir` removed, a directory with what it holds."""
    import pyarrow.fs as pafs

    gone: list[str] = []
    for name, info in sorted(there.items()):
        if any(_under(name, directory) for directory in gone):
            continue
        if info.type == pafs.FileType.Directory and not os.path.isdir(
            os.path.join(local_dir, name)
        ):
            remote.fs.delete_dir(info.path)
            gone.append(name)
        elif info.type == pafs.FileType.File and name not in local_files:
            remote.fs.delete_file(info.path)


def upload_worker_files(local_dir: str, remote: Remote) -> int:
    """A placed task's records: everything in its worker's run directory but run.json (the
    driver's alone) copied into the run's directory at `remote`, beside the other tasks', each
    file checked (copy_checked); the bytes copied."""
    import pyarrow.fs as pafs

    from ..contract.run_record import RUN_FILE

    here, local_dir = pafs.LocalFileSystem(), os.path.abspath(local_dir)
    return sum(
        copy_checked(here, os.path.join(local_dir, name), remote.fs, f"{remote.path}/{name}")
        for name in sorted(os.listdir(local_dir))
        if name != RUN_FILE
    )


def download_into(remote: Remote, local_dir: str) -> int:
    """Everything in the directory at `remote` (nothing there: nothing) copied into the local
    directory `local_dir` and checked (copy_checked); the bytes copied."""
    import pyarrow.fs as pafs

    here = pafs.LocalFileSystem()
    copied = 0
    for info in remote.fs.get_file_info(pafs.FileSelector(remote.path, allow_not_found=True)):
        local = os.path.join(local_dir, info.base_name)
        if info.type == pafs.FileType.Directory:
            os.makedirs(local, exist_ok=True)  # pyarrow makes those below it, not it
        copied += copy_checked(remote.fs, info.path, here, local)
    return copied


def download_runs(uri: str, local_parent: str) -> tuple[str, int]:
    """The runs at `uri` copied under `local_parent` and checked: a run directory (it holds
    run.json) whole, or of a parent its run=*/ directories, the directories holding a run.json
    and its own files (a sweep's or a search's record), as the report finds runs in a local
    parent. (the local copy of `uri`, bytes copied); ReportInputError when nothing is there,
    ConfigError("PATH") when the URI cannot be opened."""
    import pyarrow.fs as pafs

    from ..errors import ReportInputError
    from ..contract.run_record import RUN_FILE

    remote = open_remote(uri, "PATH")
    local = os.path.join(local_parent, os.path.basename(remote.path) or "root")
    here = pafs.LocalFileSystem()
    try:
        children = remote.fs.get_file_info(pafs.FileSelector(remote.path, allow_not_found=True))
        names = {os.path.basename(c.path): c for c in children}
        if not names:
            raise ReportInputError(f"{remote.without_secrets}: no such directory, or nothing in it")
        if RUN_FILE in names:
            return local, copy_checked(remote.fs, remote.path, here, local)
        copied = 0
        for name, info in sorted(names.items()):
            if info.type == pafs.FileType.File:
                copied += copy_checked(remote.fs, info.path, here, os.path.join(local, name))
            elif (
                name.startswith("run=")
                or remote.fs.get_file_info(f"{info.path}/{RUN_FILE}").type == pafs.FileType.File
            ):
                copied += copy_checked(remote.fs, info.path, here, os.path.join(local, name))
    except OSError as exc:
        raise ReportInputError(
            f"{remote.without_secrets}: cannot copy the runs here ({remote.why(exc)})"
        ) from None
    return local, copied
