"""up / down / status of the embedded stack; every call is safe to repeat."""

from __future__ import annotations

import fcntl
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from config.settings import Settings

from .errors import StackError
from .models import ServiceStatus, StackStatus
from .paths import StackPaths, stack_paths, worker_ready_file
from .ports import pick_ports, port_is_free
from .procs import cmdline, is_alive, read_pid, send, stop_pid, write_pid
from .services import PHASES, SERVICES, Launch, Service, child_env
from .stackfile import effective_settings, env_override, read_stack, write_stack


def service_names() -> list[str]:
    """All services, in start order."""
    return list(SERVICES)


@contextmanager
def _locked(paths: StackPaths) -> Iterator[None]:
    """One `up`/`down` at a time per home, across processes."""
    paths.home.mkdir(parents=True, exist_ok=True)
    with open(paths.lock_file, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _external(svc: Service) -> str | None:
    """The user's env value that points this service elsewhere (then we never start it)."""
    return env_override(svc.external_field) if svc.external_field else None


def _process_owner(svc: Service) -> Service:
    return SERVICES[svc.owner] if svc.owner else svc


def running_pid(settings: Settings, name: str) -> int | None:
    """The recorded pid of `name` if that process is alive and really is the service."""
    paths = stack_paths(settings)
    owner = _process_owner(SERVICES[name])
    pid = read_pid(paths.pid(owner.name))
    if pid is None or not is_alive(pid):
        return None
    line = cmdline(pid)
    return pid if line is None or owner.marker(paths) in line else None


def _owners(services: list[str] | None) -> list[str]:
    names = service_names() if services is None else list(services)
    unknown = [n for n in names if n not in SERVICES]
    if unknown:
        raise StackError(f"unknown service(s) {unknown}; known: {service_names()}")
    wanted = {_process_owner(SERVICES[n]).name for n in names}
    return [n for n in SERVICES if n in wanted]


def _ports_for(svc: Service, remembered: dict[str, Any]) -> dict[str, int]:
    """The remembered ports if all still free, else fresh ones avoiding other services' ports."""
    old = {k: remembered.get(k) for k in svc.port_keys}
    if all(isinstance(p, int) and port_is_free(p) for p in old.values()):
        return {k: int(p) for k, p in old.items()}  # type: ignore[arg-type]
    avoid = {p for k, p in remembered.items() if k not in svc.port_keys and isinstance(p, int)}
    return dict(zip(svc.port_keys, pick_ports(len(svc.port_keys), avoid), strict=True))


def _log_tail(paths: StackPaths, name: str, lines: int = 30) -> str:
    path = paths.log(name)
    try:
        with open(path, "rb") as handle:
            handle.seek(0, 2)
            handle.seek(max(0, handle.tell() - 16384))
            text = handle.read().decode(errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])


def _wait(names: list[str], settings: Settings, paths: StackPaths, pids: dict[str, int]) -> dict[str, float]:
    """Poll until every service answers; fail fast if its process dies. Returns seconds taken."""
    start = time.monotonic()
    pending = list(names)
    taken: dict[str, float] = {}
    while pending:
        for name in list(pending):
            svc = SERVICES[name]
            owner = _process_owner(svc).name
            if svc.probe(settings, paths):
                pending.remove(name)
                taken[name] = round(time.monotonic() - start, 2)
                continue
            pid = pids.get(owner)
            where = f"{svc.url(settings)}" + ("" if owner in pids else " (not started by us)")
            if pid is not None and not is_alive(pid):
                raise StackError(
                    f"{name} exited during start-up ({where}); last lines of {paths.log(owner)}:\n"
                    + _log_tail(paths, owner)
                )
            if time.monotonic() - start > svc.start_timeout:
                raise StackError(
                    f"{name} did not answer within {svc.start_timeout:.0f}s at {where}; "
                    f"last lines of {paths.log(owner)}:\n" + _log_tail(paths, owner)
                )
        if pending:
            time.sleep(0.1)
    return taken


def _set_emulation(settings: Settings, paths: StackPaths, stack: dict[str, Any], names: list[str],
                   emulate: bool | None) -> None:
    """Record `--emulate-providers` in stack.json; the worker and the gateway read it when they
    start, so running ones are stopped here and started again below with the new value."""
    if emulate is None or bool(stack["settings"].get("emulate_providers", False)) == emulate:
        return
    stack["settings"]["emulate_providers"] = emulate
    for name in ("worker", "gateway"):
        if name in names:
            _stop(settings, paths, name)


def _up(settings: Settings, paths: StackPaths, names: list[str], wait: bool,
        emulate_providers: bool | None = None) -> dict[str, float]:
    stack = read_stack(paths)
    _set_emulation(settings, paths, stack, names, emulate_providers)
    to_start: list[str] = []
    pids: dict[str, int] = {}
    for name in names:
        svc = SERVICES[name]
        value = _external(svc)
        if value is not None:
            stack["settings"][svc.external_field] = value  # type: ignore[index]
            continue
        pid = running_pid(settings, name)
        if pid is not None:
            pids[name] = pid
            continue
        paths.pid(name).unlink(missing_ok=True)
        svc.preflight()
        ports = _ports_for(svc, stack["ports"])
        stack["ports"].update(ports)
        stack["settings"].update(svc.settings_for(ports, settings))
        to_start.append(name)
    write_stack(paths, stack)
    settings = effective_settings(settings)
    env = child_env(paths)
    timings: dict[str, float] = {}
    for phase in PHASES:
        members = [n for n in phase if n in names]
        for name in members:
            if name in to_start:
                svc = SERVICES[name]
                ports = {k: stack["ports"][k] for k in svc.port_keys}
                pids[name] = svc.launch(Launch(settings, paths, ports, env))
                write_pid(paths.pid(name), pids[name])
        if not wait or not members:
            continue
        waits = members + [
            n for n, s in SERVICES.items() if s.owner in members and _external(SERVICES[s.owner]) is None
        ]
        timings.update(_wait(waits, settings, paths, pids))
        for name in waits:
            SERVICES[name].after_up(settings)
    return timings


def up(settings: Settings, *, services: list[str] | None = None, wait: bool = True,
       emulate_providers: bool | None = None) -> StackStatus:
    """Start what is not running (all services, or `services`), wait until each answers.

    `emulate_providers` (None: as it was) points every hosted provider whose base URL is not set
    at the emulator's dialect of it (REELQUEUE_EMULATE_PROVIDERS, kept in stack.json).

    Services already alive and answering are left alone; a service whose endpoint the user set
    in the environment (DATABASE_URL, REELQUEUE_S3_ENDPOINT, ...) is used, never started.
    With wait=False processes are only spawned: no readiness checks, bucket, database or migrations.
    """
    paths = stack_paths(settings)
    paths.ensure()
    names = _owners(services)
    with _locked(paths):
        _up(settings, paths, names, wait, emulate_providers)
    return status(settings)


def up_timed(settings: Settings, *, services: list[str] | None = None) -> dict[str, float]:
    """Like `up`, returning seconds until each newly waited-for service answered (for benches)."""
    paths = stack_paths(settings)
    paths.ensure()
    with _locked(paths):
        return _up(settings, paths, _owners(services), True)


def _stop(settings: Settings, paths: StackPaths, name: str) -> None:
    svc = SERVICES[name]
    if svc.owner:
        return
    pid = running_pid(settings, name)
    if pid is not None:
        stop_pid(pid, svc.stop_signal, svc.stop_timeout)
    paths.pid(name).unlink(missing_ok=True)
    if name == "worker":
        worker_ready_file(settings).unlink(missing_ok=True)


def down(settings: Settings) -> StackStatus:
    """Stop every process `up` recorded (never anything else) and drop their pid files."""
    paths = stack_paths(settings)
    with _locked(paths):
        for phase in reversed(PHASES):  # worker first, infrastructure last (in parallel)
            with ThreadPoolExecutor(max_workers=len(phase)) as pool:
                list(pool.map(lambda name: _stop(settings, paths, name), phase))
    return status(settings)


def status(settings: Settings) -> StackStatus:
    paths = stack_paths(settings)
    current = effective_settings(settings)

    def one(name: str) -> ServiceStatus:
        svc = SERVICES[name]
        pid = None if _external(svc) else running_pid(settings, name)
        answers = (pid is not None or _external(svc) is not None) and svc.probe(current, paths)
        return ServiceStatus(url=svc.url(current), pid=pid, up=answers)

    names = service_names()
    with ThreadPoolExecutor(max_workers=len(names)) as pool:
        return StackStatus(services=dict(zip(names, pool.map(one, names), strict=True)))


def restart_service(settings: Settings, name: str, *, wait: bool = True) -> StackStatus:
    """Stop `name` (if running) and start it again; for crash/restart tests."""
    paths = stack_paths(settings)
    owner = _owners([name])
    with _locked(paths):
        _stop(settings, paths, owner[0])
        _up(settings, paths, owner, wait)
    return status(settings)


def kill_service(settings: Settings, name: str, sig: int = signal.SIGKILL, wait_s: float = 10.0) -> int | None:
    """Send `sig` to the service's recorded process (a crash, if SIGKILL) and wait up to `wait_s` for
    it to be gone (a SIGTERMed worker drains first: an `up` right after must not find it still
    alive and take it for running); returns its pid."""
    pid = running_pid(settings, name)
    if pid is None:
        return None
    send(pid, sig)
    deadline = time.monotonic() + wait_s
    while is_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return pid
