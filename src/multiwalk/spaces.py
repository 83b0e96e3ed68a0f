"""The spaces a Monte Carlo walker moves in: a continuous box, or a discrete mesh with neighbours.

A **mesh** is a set of points ("nodes") given by a text file, one node per line: an index (which
is ignored: nodes are numbered 0, 1, ... in the order of the lines) then the node's coordinates::

    1 6.000000 6.000000
    2 6.000000 5.750000

A **neighbour list** says where a walker at node ``i`` may move, one line per node: ``i`` then
the indices of its neighbours (ODAT-SE's ``neighborlist.txt``; ``#`` starts a comment)::

    0 1 2 3
    1 0 2 3 4

:func:`build_neighbor_list` makes one from the coordinates (all nodes within a radius, found
with ``scipy.spatial.cKDTree``), as ODAT-SE's ``odatse_neighborlist`` does.  Errors in either
file name the file and the line.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "Box", "Mesh", "read_mesh", "read_neighbor_list", "build_neighbor_list", "write_neighbor_list",
    "check_neighbor_list",
]


@dataclass(frozen=True)
class Box:
    """A continuous box ``lower <= x < upper`` (ODAT-SE's rule: the upper edge is outside) and
    the Gaussian step width of each coordinate, all of shape ``(d,)``."""

    lower: tuple[float, ...]
    upper: tuple[float, ...]
    step: tuple[float, ...]


def _lines(path: Path, comments: str = "#", delimiter: str | None = None, skiprows: int = 0):
    """``(line number, words)`` of the non-blank lines of ``path`` after its first ``skiprows``
    lines, comments (from ``comments`` to the line's end) removed, words split at ``delimiter``
    (None: any whitespace), as ``numpy.loadtxt`` reads them; a line that is not UTF-8 text (a
    binary file) is a ValueError naming the file and the line."""
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such file") from None
    except OSError as err:
        raise OSError(f"{path}: cannot be read: {err}") from err
    with fh:
        for number, raw in enumerate(fh, 1):
            if number <= skiprows:
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise ValueError(
                    f"{path}, line {number}: not text (byte {raw[err.start]:#04x} at column {err.start + 1} is not "
                    "UTF-8): a mesh or neighbour-list file is text, one node per line"
                ) from None
            line = line.split(comments, 1)[0]
            if delimiter is None:
                words = line.split()
            elif line.strip():
                words = [w.strip() for w in line.rstrip("\r\n").split(delimiter)]
            else:
                words = []
            if words:
                yield number, words


class Mesh:
    """A discrete space: node coordinates and, for each node, the nodes a walker may move to.

    ``coordinates`` (n_nodes, d) float64; ``neighbors`` (n_nodes, k_max) int32, padded with -1;
    ``counts`` (n_nodes,) int32, the number of neighbours of each node (>= 1).  A move picks
    one neighbour uniformly, so the Metropolis-Hastings correction of a move ``i -> j`` is
    ``counts[i] / counts[j]``.  Two meshes are equal only if they are the same object (the
    solver is hashed for its compiled loops); :meth:`digest` identifies the contents.
    """

    def __init__(self, coordinates: np.ndarray, neighbor_lists: list[list[int]], source: str = "the mesh") -> None:
        coords = np.asarray(coordinates, dtype=np.float64)
        if coords.ndim != 2 or coords.shape[0] < 1 or coords.shape[1] < 1:
            raise ValueError(f"{source}: coordinates must be a (n_nodes, d) array with n_nodes, d >= 1, got {coords.shape}")
        if len(neighbor_lists) != coords.shape[0]:
            raise ValueError(
                f"{source}: the neighbour list has {len(neighbor_lists)} nodes but the mesh has {coords.shape[0]}: "
                "build it from this mesh (multiwalk neighborlist MESH -r RADIUS)"
            )
        check_neighbor_list(neighbor_lists, source)
        counts = np.array([len(nn) for nn in neighbor_lists], dtype=np.int32)
        k_max = int(counts.max())
        nbrs = np.full((coords.shape[0], k_max), -1, dtype=np.int32)
        for i, nn in enumerate(neighbor_lists):
            nbrs[i, : len(nn)] = nn
        self.coordinates = coords
        self.neighbors = nbrs
        self.counts = counts
        self.source = source

    @property
    def n_nodes(self) -> int:
        return int(self.coordinates.shape[0])

    @property
    def dimension(self) -> int:
        return int(self.coordinates.shape[1])

    def digest(self) -> str:
        """A short hash of the coordinates and the neighbour lists (saved with checkpoints)."""
        h = hashlib.blake2b(digest_size=8)
        for a in (self.coordinates, self.neighbors):
            h.update(np.ascontiguousarray(a).tobytes())
        return h.hexdigest()

    def __repr__(self) -> str:
        return f"Mesh({self.n_nodes} nodes in {self.dimension}-D, up to {self.neighbors.shape[1]} neighbours, {self.source})"

    @classmethod
    def from_files(cls, mesh_path: str | os.PathLike, neighbor_path: str | os.PathLike, **mesh_format: Any) -> Mesh:
        """Read a mesh file and its neighbour-list file (errors name the file and the line);
        ``mesh_format``: :func:`read_mesh`'s ``comments``, ``delimiter``, ``skiprows``."""
        coords = read_mesh(mesh_path, **mesh_format)
        nbrs = read_neighbor_list(neighbor_path, coords.shape[0])
        return cls(coords, nbrs, source=f"{neighbor_path}")


def read_mesh(path: str | os.PathLike, comments: str = "#", delimiter: str | None = None, skiprows: int = 0) -> np.ndarray:
    """The coordinates ``(n_nodes, d)`` of a mesh file (index column dropped); ``comments``,
    ``delimiter`` and ``skiprows`` as ``numpy.loadtxt``'s (ODAT-SE's mesh keys of those names)."""
    path = Path(path)
    rows: list[list[float]] = []
    width = None
    for number, words in _lines(path, comments, delimiter, skiprows):
        if len(words) < 2:
            raise ValueError(
                f"{path}, line {number}: {len(words)} column; a mesh line is an index then the coordinates"
            )
        if width is None:
            width = len(words)
        elif len(words) != width:
            raise ValueError(
                f"{path}, line {number}: {len(words)} columns where the lines above have {width} "
                "(an index then the same number of coordinates on every line)"
            )
        try:
            float(words[0])
            rows.append([float(w) for w in words[1:]])
        except ValueError:
            bad = next(w for w in words if not _is_float(w))
            raise ValueError(f"{path}, line {number}: {bad!r} is not a number") from None
    if not rows:
        raise ValueError(f"{path}: no mesh points (every line is blank or a comment)")
    coords = np.array(rows, dtype=np.float64)
    bad_rows = np.flatnonzero(~np.all(np.isfinite(coords), axis=1))
    if bad_rows.size:
        raise ValueError(f"{path}: mesh point {int(bad_rows[0])} has a coordinate that is not finite")
    return coords


def _is_float(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def read_neighbor_list(path: str | os.PathLike, n_nodes: int) -> list[list[int]]:
    """The neighbour lists of ``n_nodes`` nodes from an ODAT-SE neighbour-list file.

    Every node must have a line, and every index must lie in ``[0, n_nodes)``; the list must be
    symmetric (``j`` lists ``i`` when ``i`` lists ``j``: the Metropolis-Hastings correction
    needs the reverse move) and connect all nodes (else some are never visited).
    """
    path = Path(path)
    lists: list[list[int] | None] = [None] * n_nodes
    line_of: dict[int, int] = {}
    for number, words in _lines(path):
        try:
            idx = [int(w) for w in words]
        except ValueError:
            bad = next(w for w in words if not w.lstrip("-").isdigit())
            raise ValueError(f"{path}, line {number}: {bad!r} is not a node index (an integer)") from None
        bad = [i for i in idx if not 0 <= i < n_nodes]
        if bad:
            raise ValueError(
                f"{path}, line {number}: node index {bad[0]} is outside 0..{n_nodes - 1} "
                f"(the mesh has {n_nodes} points, numbered from 0 in the order of its lines)"
            )
        i = idx[0]
        if lists[i] is not None:
            raise ValueError(f"{path}, line {number}: node {i} already has a line (line {line_of[i]})")
        if len(idx) == 1:
            raise ValueError(f"{path}, line {number}: node {i} has no neighbours, so a walker there could never move")
        lists[i] = idx[1:]
        line_of[i] = number
    missing = [i for i, nn in enumerate(lists) if nn is None]
    if missing:
        raise ValueError(
            f"{path}: {len(missing)} of the {n_nodes} mesh points have no line (the first is node {missing[0]}): "
            "the neighbour list does not belong to this mesh"
        )
    out = [nn for nn in lists if nn is not None]
    check_neighbor_list(out, str(path), line_of)
    return out


def check_neighbor_list(lists: list[list[int]], source: str, line_of: dict[int, int] | None = None) -> None:
    """Raise ValueError unless every node has a neighbour, the lists are symmetric and connected
    (``line_of``: node -> line of the file, for the message)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    n = len(lists)
    empty = [i for i, nn in enumerate(lists) if len(nn) == 0]
    if empty:
        raise ValueError(f"{source}: node {empty[0]} has no neighbours: increase the radius")
    rows = np.repeat(np.arange(n), [len(nn) for nn in lists])
    cols = np.concatenate([np.asarray(nn, dtype=np.int64) for nn in lists])
    if cols.min() < 0 or cols.max() >= n:
        raise ValueError(f"{source}: a neighbour index is outside 0..{n - 1}")
    pairs = np.sort(rows * n + cols)  # each (node, neighbour) once: a second entry would double that move's weight
    repeated = pairs[1:][pairs[1:] == pairs[:-1]]
    if repeated.size:
        i, j = divmod(int(repeated[0]), n)
        where = f"{source}, line {line_of[i]}" if line_of else source
        raise ValueError(f"{where}: node {i} lists neighbour {j} more than once: list each neighbour once")
    graph = coo_matrix((np.ones(rows.size), (rows, cols)), shape=(n, n)).tocsr()
    asym = (graph != graph.T).nonzero()
    if asym[0].size:
        i, j = int(asym[0][0]), int(asym[1][0])
        a, b = (i, j) if j in lists[i] else (j, i)
        where = f"{source}, line {line_of[a]}" if line_of else source
        also = f" (line {line_of[b]})" if line_of else ""
        raise ValueError(
            f"{where}: node {a} lists {b} but node {b}{also} does not list {a}: the neighbour list must be symmetric"
        )
    n_parts, labels = connected_components(graph, directed=False)
    if n_parts > 1:
        apart = int(np.flatnonzero(labels != labels[0])[0])
        raise ValueError(
            f"{source}: the neighbour graph falls into {n_parts} parts (node {apart} cannot be reached from node 0): "
            "increase the radius"
        )


def build_neighbor_list(
    coordinates: np.ndarray, radius: float, unit: np.ndarray | None = None, allow_selfloop: bool = False
) -> list[list[int]]:
    """For every node, the sorted indices of the nodes within ``radius`` (Euclidean distance of
    ``coordinates / unit``), itself excluded unless ``allow_selfloop``: ODAT-SE's rule."""
    from scipy.spatial import cKDTree

    if not (isinstance(radius, (int, float)) and np.isfinite(radius) and radius > 0):
        raise ValueError(f"radius must be a positive number, got {radius!r}")
    x = np.asarray(coordinates, dtype=np.float64)
    if unit is not None:
        x = x / np.asarray(unit, dtype=np.float64)
    tree = cKDTree(x)
    found = tree.query_ball_point(x, r=radius, return_sorted=True)
    if allow_selfloop:
        return [list(map(int, nn)) for nn in found]
    return [[int(j) for j in nn if j != i] for i, nn in enumerate(found)]


def write_neighbor_list(
    path: str | os.PathLike, lists: list[list[int]], radius: float | None = None, unit: np.ndarray | None = None
) -> None:
    """Write ODAT-SE's neighbour-list file (``# radius = ...`` and ``# unit = ...`` comments first)."""
    with open(path, "w") as fh:
        if radius is not None:
            fh.write(f"# radius = {radius}\n")
        if unit is not None:
            fh.write("# unit =" + "".join(f" {float(u)}" for u in unit) + "\n")
        fh.write("".join(" ".join(map(str, [i, *nn])) + "\n" for i, nn in enumerate(lists)))
