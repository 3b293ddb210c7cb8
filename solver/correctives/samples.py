"""The simulated samples the correctives are fitted to: which, in what order, solved how, kept where.

Samples (paper 002 §4): for a pair of keys (a, b), w_a ∈ FIRST_WEIGHTS and w_b ∈ SECOND_WEIGHTS,
every other key 0. They are grouped into *chains*, each one `animate` run of quasi-static frames
(every frame a full equilibrium solve, warm-started from the frame before it):

  single  a        w_a = 0.25, 0.5, 0.75, 1          (the w_b = 0 samples of every pair with a)
  probe   a        (w_a, w_b) = (1, 1) for each later key b, one after another (the pruning test)
  pair    a, b     the 16 samples with w_a, w_b > 0, in a serpentine (w_b up, then down) so each
                   frame starts from a neighbouring pose: (0.25, 0.25 … 1), (0.5, 1 … 0.25), …
  combination      3–5 keys linked by kept pairs, on a ray from the neutral: t · d for t = 0.25,
          a, b, c…  0.5, 0.75, 1 and a direction d with entries in [0.4, 1] (not in the paper)

Why combinations: an animation moves several keys at once, and the pair samples alone leave the
pair terms to extrapolate there. On ICT's 200-frame acceptance animation (5 keys, all 10 pairs
kept) the rig fitted to the 180 pair-study samples is 42 % nearer the simulation than the linear
rig; with 10 combination rays beside them 49 %, 50 % with the ridge (docs/correctives.md). They
are drawn by a generator seeded from the key names and kept pairs, so a rerun asks for the same
chains and finds them stored.

A key fitted on top of another (the fit's `fit_context`: mouthClose on jawOpen) is never weighted
above that other in any sample (`lifted_to_contexts`): its activations are a difference to the
other's, and alone they may be no pose at all (inverse/blend.py refuses such frames). So its
single samples carry the context at the same weight, and a pair sample where it would lead is
lifted onto the diagonal; the fit sees each sample's true weights.

A chain is solved by the `animate` command itself (`python -m solver animate MODEL FIT WEIGHTS
--collisions …`) in a child process of its own, with its own timeout, in a scratch folder removed
afterwards: there is no second forward path, and a stuck or crashed chain is killed without
touching the others. Its skin (what `animate` writes: detail, skin filter and contacts included)
is stored atomically as `<chain>.npz` in the samples folder beside CORR.npz; a rerun skips every
chain stored there, as long as the model, the fit and the collision settings are the same ones
(a fingerprint file says so; a different one empties the folder).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..npz_files import NpzReadError, read_npz, write_npz_atomically

FIRST_WEIGHTS = (0.25, 0.5, 0.75, 1.0)
SECOND_WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0)
SOLVER_ROOT = Path(__file__).resolve().parents[2]       # the folder holding the solver package
FINGERPRINT_FILE = "fingerprint.txt"


class SampleError(RuntimeError):
    """A chain of samples could not be solved (its `animate` run failed or timed out)."""


@dataclass(frozen=True)
class Chain:
    kind: str                 # "single", "probe" or "pair"
    keys: tuple               # the key (single, probe) or the two keys (pair) it is about
    weights: np.ndarray       # (T, K) per frame, in the order of the selected keys

    @property
    def stem(self) -> str:
        """A file name safe on every system, unique to the chain."""
        label = "__".join(self.keys)
        digest = hashlib.sha1(f"{self.kind}:{label}".encode()).hexdigest()[:8]
        return f"{self.kind}-{re.sub(r'[^A-Za-z0-9_.-]', '-', label)[:80]}-{digest}"


def lifted_to_contexts(weights: np.ndarray, keys, contexts) -> np.ndarray:
    """(T, K) weights with every key of `contexts` ({key: the key it was fitted on top of}, both
    among `keys`) raised where needed so that it is never above its context."""
    weights = np.array(weights, dtype=np.float64)
    keys = list(keys)
    for key, context in (contexts or {}).items():
        column, base = keys.index(key), keys.index(context)
        weights[:, base] = np.maximum(weights[:, base], weights[:, column])
    return weights


def single_chain(keys, key: str, contexts=None) -> Chain:
    weights = np.zeros((len(FIRST_WEIGHTS), len(keys)))
    weights[:, list(keys).index(key)] = FIRST_WEIGHTS
    return Chain("single", (key,), lifted_to_contexts(weights, keys, contexts))


def probe_chain(keys, key: str, partners, contexts=None) -> Chain:
    weights = np.zeros((len(partners), len(keys)))
    weights[:, list(keys).index(key)] = 1.0
    for row, partner in enumerate(partners):
        weights[row, list(keys).index(partner)] = 1.0
    return Chain("probe", (key,), lifted_to_contexts(weights, keys, contexts))


def pair_chain(keys, first: str, second: str, contexts=None) -> Chain:
    rows = []
    for index, weight in enumerate(FIRST_WEIGHTS):
        seconds = SECOND_WEIGHTS[1:] if index % 2 == 0 else SECOND_WEIGHTS[:0:-1]
        rows += [(weight, other) for other in seconds]
    weights = np.zeros((len(rows), len(keys)))
    weights[:, list(keys).index(first)] = [row[0] for row in rows]
    weights[:, list(keys).index(second)] = [row[1] for row in rows]
    return Chain("pair", (first, second), lifted_to_contexts(weights, keys, contexts))


COMBINATION_SIZES = (3, 4, 5)
COMBINATION_DIRECTION_RANGE = (0.4, 1.0)


def combination_chains(keys, kept_pairs, count: int, contexts=None) -> list:
    """Up to `count` chains, each a ray t · d (t ∈ FIRST_WEIGHTS) to a combination of 3, 4, 5, 3, …
    keys that the kept pairs link: grown from a kept pair by keys kept-paired with one already in
    it, fewer where none is left. Distinct key sets; deterministic for the same keys and pairs."""
    keys = list(keys)
    neighbours = {key: set() for key in keys}
    for first, second in kept_pairs:
        neighbours[first].add(second)
        neighbours[second].add(first)
    pairs = [tuple(pair) for pair in kept_pairs]
    if not pairs or count <= 0:
        return []
    rng = np.random.default_rng(int(hashlib.sha1("|".join(keys + sorted(map("+".join, pairs))).encode())
                                    .hexdigest()[:12], 16))
    chains, seen = [], set()
    for attempt in range(50 * count):
        if len(chains) >= count:
            break
        size = COMBINATION_SIZES[attempt % len(COMBINATION_SIZES)]
        members = list(pairs[rng.integers(len(pairs))])
        while len(members) < size:
            reachable = sorted(set().union(*(neighbours[key] for key in members)) - set(members), key=keys.index)
            if not reachable:
                break
            members.append(reachable[rng.integers(len(reachable))])
        members = tuple(sorted(members, key=keys.index))
        if len(members) < 3 or members in seen:      # a pair no kept pair extends, or one drawn already
            continue
        seen.add(members)
        direction = rng.uniform(*COMBINATION_DIRECTION_RANGE, len(members))
        weights = np.zeros((len(FIRST_WEIGHTS), len(keys)))
        weights[:, [keys.index(key) for key in members]] = np.outer(FIRST_WEIGHTS, direction)
        chains.append(Chain("combination", members, lifted_to_contexts(weights, keys, contexts)))
    return chains


def candidate_pairs(keys, chosen=()) -> list:
    """The pairs to probe, each ordered as `keys` are: every pair of the keys, or only the `chosen`
    ones (the user's restriction, each given in either order)."""
    pairs = [(first, second) for index, first in enumerate(keys) for second in keys[index + 1:]]
    if chosen:
        wanted = {frozenset(pair) for pair in chosen}
        pairs = [pair for pair in pairs if frozenset(pair) in wanted]
    return pairs


def first_chains(keys, chosen_pairs=(), contexts=None):
    """(candidate pairs, single chains, probe chains): what is solved before any pair is kept.
    A key is probed only against its later partners among the candidates; a key with none has
    no probe chain."""
    candidates = candidate_pairs(keys, chosen_pairs)
    singles = [single_chain(keys, key, contexts) for key in keys]
    probes = [probe_chain(keys, key, partners, contexts) for key in keys
              if (partners := [b for a, b in candidates if a == key])]
    return candidates, singles, probes


# --------------------------------------------------------------------------- the store

class SampleStore:
    """The samples folder: one `<chain>.npz` (weights, skin, converged) per solved chain."""

    def __init__(self, folder: Path, fingerprint: str, report):
        self.folder = Path(folder)
        if self.folder.is_symlink() or self.folder.is_file():
            self.folder.unlink()
        marker = self.folder / FINGERPRINT_FILE
        if self.folder.is_dir() and (not marker.is_file() or marker.read_text().strip() != fingerprint):
            report.warning(f"the samples in {self.folder.name} were solved for another model, fit or collision "
                           f"setting; they are solved afresh")
            shutil.rmtree(self.folder)
        self.folder.mkdir(exist_ok=True)
        if not marker.is_file():
            marker.write_text(fingerprint + "\n")

    def path(self, chain: Chain) -> Path:
        return self.folder / f"{chain.stem}.npz"

    def load(self, chain: Chain):
        """(skin (T, V, 3), converged (T,)) of a stored chain, or None when it is not stored
        (or stored for other weights, or unreadable: then it is solved again)."""
        path = self.path(chain)
        if not path.is_file():
            return None
        try:
            arrays = read_npz(path)
        except NpzReadError:
            return None
        if arrays.get("weights") is None or arrays["weights"].shape != chain.weights.shape or \
                not np.array_equal(arrays["weights"], chain.weights):
            return None
        return arrays["skin"], arrays["converged"]

    def save(self, chain: Chain, skin: np.ndarray, converged: np.ndarray) -> None:
        write_npz_atomically(self.path(chain), {"weights": chain.weights, "skin": skin, "converged": converged})


def store_fingerprint(model: Path, fit: Path, collisions: tuple) -> str:
    from ..physics.checkpoint import fingerprint
    return fingerprint({"collisions": list(collisions), "first": FIRST_WEIGHTS, "second": SECOND_WEIGHTS},
                       [model, fit])


# --------------------------------------------------------------------------- solving

@dataclass
class _Running:
    chain: Chain
    process: subprocess.Popen
    scratch: Path
    deadline: float
    log: object


def _start(chain: Chain, keys, model: Path, fit: Path, collisions: tuple, scratch_root: Path,
           timeout_s: float, single_threaded: bool) -> _Running:
    scratch = Path(tempfile.mkdtemp(prefix=f"{chain.kind}-", dir=scratch_root))
    write_npz_atomically(scratch / "weights.npz", {"names": np.array(keys), "weights": chain.weights,
                                                   "fps": np.array(24.0)})
    command = [sys.executable, "-m", "solver", "--json", "animate", str(model), str(fit),
               str(scratch / "weights.npz"), "-o", str(scratch / "result.npz")]
    if collisions:
        command += ["--collisions", ",".join(collisions)]
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(SOLVER_ROOT)] + [part for part in os.environ.get("PYTHONPATH", "").split(os.pathsep) if part]))
    if single_threaded:     # N children on N cores: one thread each, as the fit's workers (inverse/shapes.py)
        environment.update({key: "1" for key in ("OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS", "OMP_NUM_THREADS")})
    log = open(scratch / "log.txt", "w")
    # Its own session: a timeout or a cancel kills the child and anything it started, and only that.
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=scratch, env=environment,
                               start_new_session=True)
    return _Running(chain, process, scratch, time.monotonic() + timeout_s, log)


def _stop(running: _Running) -> None:
    if running.process.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(running.process.pid, signal.SIGKILL)
        running.process.wait()
    running.log.close()
    shutil.rmtree(running.scratch, ignore_errors=True)


def _finish(running: _Running, store: SampleStore) -> None:
    """Store a finished chain's skin, or raise SampleError with the child's own error line."""
    result = running.scratch / "result.npz"
    if running.process.returncode != 0 or not result.is_file():
        running.log.flush()
        text = (running.scratch / "log.txt").read_text(errors="replace")
        messages = [json.loads(line).get("message", "") for line in text.splitlines()
                    if line.startswith("{") and '"type": "error"' in line]
        reason = messages[-1] if messages else text.strip()[-600:]
        raise SampleError(f"the {running.chain.kind} samples of {' and '.join(running.chain.keys)} could not be "
                          f"simulated (animate exited {running.process.returncode}): {reason}")
    arrays = read_npz(result, ("skin_positions", "converged"))
    store.save(running.chain, arrays["skin_positions"], arrays["converged"])


def solve_chains(chains, keys, model: Path, fit: Path, collisions: tuple, store: SampleStore, processes: int,
                 timeout_s: float, report, done_before: int = 0, total: int = 0) -> dict:
    """Solve the chains not stored yet, at most `processes` at a time; return {stem: (skin,
    converged)} for all of them. A chain that fails or outlives `timeout_s` stops the run with a
    SampleError after the running ones finish (each finished one is stored, so a rerun goes on
    from there); a cancel kills the running children and removes their scratch folders."""
    solved = {}
    pending = []
    for chain in chains:
        stored = store.load(chain)
        if stored is None:
            pending.append(chain)
        else:
            solved[chain.stem] = stored
    if len(solved):
        report.progress(f"{len(solved)} of {len(chains)} chains of samples already solved, skipped",
                        fraction=None, skipped=len(solved))
    running: list = []
    failures: list = []
    finished = 0
    scratch_root = store.folder / "scratch"
    scratch_root.mkdir(exist_ok=True)
    try:
        while pending or running:
            while pending and len(running) < processes and not failures:
                running.append(_start(pending.pop(0), keys, model, fit, collisions, scratch_root, timeout_s,
                                      single_threaded=processes > 1))
            time.sleep(0.05)
            for item in list(running):
                if item.process.poll() is None and time.monotonic() < item.deadline:
                    continue
                running.remove(item)
                try:
                    if item.process.poll() is None:
                        failures.append(SampleError(f"the {item.chain.kind} samples of "
                                                    f"{' and '.join(item.chain.keys)} took longer than "
                                                    f"{timeout_s:g} s; stopped"))
                    else:
                        _finish(item, store)
                        solved[item.chain.stem] = store.load(item.chain)
                        finished += 1
                        report.progress(f"{item.chain.kind} {' × '.join(item.chain.keys)}: "
                                        f"{len(item.chain.weights)} samples solved",
                                        fraction=round((done_before + finished) / max(total, 1), 4),
                                        chain=item.chain.stem, samples=len(item.chain.weights))
                except SampleError as error:
                    failures.append(error)
                finally:
                    _stop(item)
            if failures and not running:
                pending.clear()
    finally:
        for item in running:
            _stop(item)
        shutil.rmtree(scratch_root, ignore_errors=True)
    if failures:
        raise failures[0]
    return solved
