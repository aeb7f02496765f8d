"""Synthetic stand-ins for the real-data tasks, for a machine without the data.

``data = "standin"`` on ``mnist``, ``permuted_mnist``, ``mnist_rows`` and
``har2`` trains on data generated here instead of the downloaded files;
``data = "auto"`` uses the real files when they are in the cache and the
stand-in otherwise (it never downloads, so it never fails for want of a
network); ``data = "real"`` (the default) is the real data only.

A stand-in has the real data's shapes, dtypes, classes and split sizes, so a
preset written for the real task runs unchanged. It is *not* the real data:
numbers measured on it say how the models behave on a task of the same
shape, never what the paper measured. Every run on it says so in its
baseline's label (:func:`label`), which the store keeps with the run and the
pages and ``python -m stability show ID`` print.

Every example is a pure function of ``(seed, stream, example id)``
(:func:`uniforms`: a counter-based hash, SplitMix64), so nothing is generated
until a batch asks for it: a stand-in task builds in milliseconds whatever
its size, and the same seed gives the same examples in any order, on any
machine. Different seeds draw different examples of the same distribution.

MNIST stand-in (:func:`render_digits`): each digit 0-9 is a fixed set of pen
strokes (lines, arcs, a curve) drawn as an anti-aliased line of random
thickness after a random affine map (rotation, scale, shear, shift), a smooth
random warp of the pen path, and random ink intensity with a little noise on
the ink. As in MNIST the digit fills about 20 x 20 pixels of the 28 x 28
image and most pixels are exactly 0, so read pixel by pixel the class is
carried by a few runs of ink hundreds of steps apart.

HAR-2 stand-in (:func:`har_windows`): windows of 128 steps at 50 Hz of the 9
channels of the real set (body acceleration, body gyroscope, total
acceleration = body + gravity, each x y z). Six activity-like generators are
merged into the two classes as HAR-2 merges the six activities: walking,
downstairs, standing (class 0) against upstairs, sitting, laying (class 1).
Walking-like windows are a step cadence with harmonics, stride sway and noise;
the classes differ only by overlapping distributions of cadence, amplitude
and body tilt (walking against upstairs) and of tilt (standing against
sitting), so no model can be perfect, the training set is finite (as the real
7,352 windows), and a model that memorises it shows a train/test gap.
"""

from __future__ import annotations

import numpy as np

DATA_CHOICES = ("real", "standin", "auto")
DATA_HELP = ("real: the downloaded data set; standin: a seeded synthetic stand-in of the same shapes "
             "(stability.tasks.standin), nothing downloaded; auto: the real files if they are in the "
             "cache, else the stand-in")


def label(baseline_label: str, dataset: str) -> str:
    """The baseline's label of a run on the stand-in: says which data it trained on."""
    return f"{baseline_label} (SYNTHETIC STAND-IN data, not the real {dataset})"


# ------------------------------------------------------------------------------------- random draws
def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser on uint64 arrays (wrapping arithmetic)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def uniforms(seed: int, stream: int, ids: np.ndarray, count: int) -> np.ndarray:
    """``(len(ids), count)`` float64 uniforms in [0, 1), each a function of (seed, stream, id, column)."""
    with np.errstate(over="ignore"):
        base = _mix(np.array([seed * 1_000_003 + stream], dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15))
        keys = _mix(np.asarray(ids, dtype=np.uint64)[:, None] * np.uint64(0xD1B54A32D192ED03) + base)
        z = _mix(keys + (np.arange(count, dtype=np.uint64) + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15))
    return (z >> np.uint64(11)).astype(np.float64) * 2.0**-53


def normals(seed: int, stream: int, ids: np.ndarray, count: int) -> np.ndarray:
    """Standard normal draws by Box-Muller from :func:`uniforms` (same keys)."""
    u = uniforms(seed, stream, ids, 2 * count)
    return np.sqrt(-2.0 * np.log1p(-u[:, :count])) * np.cos(2.0 * np.pi * u[:, count:])


def balanced_labels(count: int, classes: int, generator: np.random.Generator) -> np.ndarray:
    """``count`` int64 labels, each class ``count // classes`` or one more times, in a seeded order."""
    return generator.permutation(np.arange(count) % classes).astype(np.int64)


# ------------------------------------------------------------------------------------------ MNIST
def _arc(cx, cy, rx, ry, start, stop, points=14):
    angles = np.radians(np.linspace(start, stop, points))
    return np.stack([cx + rx * np.cos(angles), cy + ry * np.sin(angles)], axis=1)


def _line(*corners):
    return np.array(corners, dtype=float)


def _bezier(p0, p1, p2, points=10):
    t = np.linspace(0, 1, points)[:, None]
    return (1 - t) ** 2 * np.array(p0) + 2 * t * (1 - t) * np.array(p1) + t**2 * np.array(p2)


# Pen strokes of each digit, x right and y down, in a box of about [-0.6, 0.6] x [-1, 1].
STROKES = {
    0: [_arc(0, 0, 0.48, 0.9, 0, 360, 24)],
    1: [_line((-0.25, -0.6), (0.05, -0.9), (0.0, 0.9))],
    2: [np.vstack([_arc(0, -0.45, 0.45, 0.45, 180, 380), _line((-0.5, 0.9), (0.55, 0.9))])],
    3: [np.vstack([_arc(0, -0.47, 0.42, 0.43, 200, 450), _arc(0, 0.43, 0.47, 0.47, -90, 160)])],
    4: [_line((0.2, -0.9), (-0.5, 0.35), (0.55, 0.35)), _line((0.3, -0.3), (0.3, 0.9))],
    5: [np.vstack([_line((0.5, -0.9), (-0.35, -0.9), (-0.4, -0.1)), _arc(0, 0.35, 0.5, 0.5, -130, 150)])],
    6: [_bezier((0.35, -0.9), (-0.5, -0.5), (-0.45, 0.45)), _arc(0, 0.45, 0.45, 0.45, 0, 360, 20)],
    7: [_line((-0.5, -0.9), (0.55, -0.9), (-0.1, 0.9))],
    8: [_arc(0, -0.5, 0.38, 0.38, 0, 360, 18), _arc(0, 0.45, 0.47, 0.47, 0, 360, 20)],
    9: [_arc(0, -0.45, 0.45, 0.45, 0, 360, 20), _line((0.45, -0.45), (0.35, 0.9))],
}


def _segments(digit: int) -> np.ndarray:
    """(S, 2, 2) float32: the strokes of ``digit`` as S line segments (start, end)."""
    return np.concatenate([np.stack([path[:-1], path[1:]], axis=1) for path in STROKES[digit]]).astype(np.float32)


SEGMENTS = {digit: _segments(digit) for digit in range(10)}
_GRID_X, _GRID_Y = (axis.reshape(784).astype(np.float32) for axis in np.meshgrid(np.arange(28), np.arange(28)))


def render_digits(seed: int, ids: np.ndarray, labels: np.ndarray, chunk: int = 128) -> np.ndarray:
    """``(len(ids), 784)`` uint8 images of ``labels`` (row-major 28 x 28), example ``id`` drawn from ``seed``."""
    ids, labels = np.asarray(ids), np.asarray(labels)
    out = np.empty((len(ids), 784), dtype=np.uint8)
    for digit in np.unique(labels):
        where = np.flatnonzero(labels == digit)
        for start in range(0, len(where), chunk):
            part = where[start : start + chunk]
            out[part] = _render(seed, ids[part], int(digit))
    return out


def _render(seed: int, ids: np.ndarray, digit: int) -> np.ndarray:
    u = uniforms(seed, 10, ids, 14)
    n = len(ids)
    angle = (u[:, 0] - 0.5) * 0.5  # +-14 degrees
    scale_x, scale_y = 0.75 + 0.35 * u[:, 1], 0.8 + 0.3 * u[:, 2]
    shear = (u[:, 3] - 0.5) * 0.6
    shift = (u[:, 4:6] - 0.5) * 0.3
    cos, sin = np.cos(angle), np.sin(angle)
    # x' = R (S (x + shear * y)) + shift, per example
    a = np.stack([np.stack([cos * scale_x, cos * scale_x * shear - sin * scale_y], -1),
                  np.stack([sin * scale_x, sin * scale_x * shear + cos * scale_y], -1)], -2)  # (n, 2, 2)
    points = np.broadcast_to(SEGMENTS[digit], (n, *SEGMENTS[digit].shape))  # (n, S, 2, 2)
    # a smooth warp of the pen path: low-frequency sines of random phase
    amp = 0.1 * u[:, 6:8]
    phase = 2 * np.pi * u[:, 8:10]
    freq = 1.5 + 2.0 * u[:, 10:12]
    warp_x = amp[:, 0, None, None] * np.sin(freq[:, 0, None, None] * points[..., 1] + phase[:, 0, None, None])
    warp_y = amp[:, 1, None, None] * np.sin(freq[:, 1, None, None] * points[..., 0] + phase[:, 1, None, None])
    points = points + np.stack([warp_x, warp_y], -1)
    points = np.einsum("nij,nskj->nski", a, points) + shift[:, None, None, :]
    pixels = (13.5 + 9.0 * points).astype(np.float32)  # (n, S, 2, 2) in pixel coordinates
    sx, sy = pixels[:, None, :, 0, 0], pixels[:, None, :, 0, 1]  # (n, 1, S) segment starts
    dx, dy = pixels[:, None, :, 1, 0] - sx, pixels[:, None, :, 1, 1] - sy
    inverse = 1.0 / np.maximum(dx * dx + dy * dy, 1e-6)
    rx, ry = _GRID_X[None, :, None] - sx, _GRID_Y[None, :, None] - sy  # (n, 784, S)
    t = np.clip((rx * dx + ry * dy) * inverse, 0.0, 1.0)
    rx -= t * dx
    ry -= t * dy
    distance = np.sqrt((rx * rx + ry * ry).min(-1))  # (n, 784): to the nearest segment
    half_width = (0.9 + 1.1 * u[:, 12]).astype(np.float32)[:, None]
    ink = np.clip(half_width + 0.5 - distance, 0.0, 1.0)
    peak = (0.8 + 0.2 * u[:, 13]).astype(np.float32)[:, None]
    speckle = uniforms(seed, 11, ids, 784).astype(np.float32)
    ink = ink * peak * (0.85 + 0.3 * speckle)
    return np.clip(np.rint(ink * 255.0), 0, 255).astype(np.uint8).reshape(n, 784)


class LazyImages:
    """Rendered MNIST stand-in images, each made once on first use and kept (uint8, 784 bytes each)."""

    def __init__(self, seed: int, total: int):
        self.seed = seed
        self.images = np.zeros((total, 784), dtype=np.uint8)  # pages only touched when filled
        self.done = np.zeros(total, dtype=bool)

    def __call__(self, ids: np.ndarray, labels: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids)
        todo = ~self.done[ids]
        if todo.any():
            fresh, index = np.unique(ids[todo], return_index=True)
            self.images[fresh] = render_digits(self.seed, fresh, np.asarray(labels)[todo][index])
            self.done[fresh] = True
        return self.images[ids]


# ------------------------------------------------------------------------------------------ HAR-2
# Activities as in UCI HAR's y_*.txt: 1 walking, 2 upstairs, 3 downstairs, 4 sitting, 5 standing, 6 laying.
# Per activity: step cadence in Hz (0: still), its spread, body acceleration amplitude in g and its
# spread, forward tilt of the body in degrees and its spread, and which axis gravity lies along.
ACTIVITIES = {
    1: dict(cadence=1.85, cadence_sd=0.15, amp=0.28, amp_sd=0.08, tilt=4.0, tilt_sd=6.0, lying=False),
    2: dict(cadence=1.65, cadence_sd=0.15, amp=0.24, amp_sd=0.08, tilt=12.0, tilt_sd=6.0, lying=False),
    3: dict(cadence=2.05, cadence_sd=0.15, amp=0.36, amp_sd=0.1, tilt=-2.0, tilt_sd=6.0, lying=False),
    4: dict(cadence=0.0, cadence_sd=0.0, amp=0.0, amp_sd=0.0, tilt=22.0, tilt_sd=8.0, lying=False),
    5: dict(cadence=0.0, cadence_sd=0.0, amp=0.0, amp_sd=0.0, tilt=6.0, tilt_sd=8.0, lying=False),
    6: dict(cadence=0.0, cadence_sd=0.0, amp=0.0, amp_sd=0.0, tilt=85.0, tilt_sd=8.0, lying=True),
}
HAR_RATE = 50.0  # Hz


def _table(key: str) -> np.ndarray:
    return np.array([0.0] + [ACTIVITIES[a][key] for a in range(1, 7)])


def har_windows(seed: int, ids: np.ndarray, activities: np.ndarray, steps: int = 128) -> np.ndarray:
    """``(len(ids), steps, 9)`` float32 windows of ``activities`` (1-6), in the 9 real channels' order."""
    ids, activities = np.asarray(ids), np.asarray(activities)
    n = len(ids)
    z = normals(seed, 20, ids, 12)
    u = uniforms(seed, 21, ids, 6)
    moving = _table("cadence")[activities] > 0
    cadence = _table("cadence")[activities] + _table("cadence_sd")[activities] * z[:, 0]
    amp = np.maximum(_table("amp")[activities] + _table("amp_sd")[activities] * z[:, 1], 0.02) * moving
    tilt = np.radians(_table("tilt")[activities] + _table("tilt_sd")[activities] * z[:, 2])
    roll = np.radians(8.0 * z[:, 3])  # how the phone sits on the waist, per window
    t = np.arange(steps) / HAR_RATE
    phase = 2 * np.pi * (cadence[:, None] * t[None] + u[:, 0:1])  # (n, T)
    harmonic = 0.35 + 0.25 * u[:, 1:2]
    # body acceleration: vertical bounce at the cadence (x), stride sway at half of it (y), surge (z)
    body = np.stack([
        amp[:, None] * (np.sin(phase) + harmonic * np.sin(2 * phase + 2 * np.pi * u[:, 2:3])),
        0.5 * amp[:, None] * np.sin(0.5 * phase + 2 * np.pi * u[:, 3:4]),
        0.6 * amp[:, None] * np.sin(phase + 1.2 + 0.3 * z[:, 4:5]),
    ], axis=-1)
    gyro = np.stack([
        2.0 * amp[:, None] * np.sin(0.5 * phase + 0.7),
        1.5 * amp[:, None] * np.sin(phase + 2 * np.pi * u[:, 4:5]),
        1.2 * amp[:, None] * np.sin(0.5 * phase + 2 * np.pi * u[:, 5:6]),
    ], axis=-1)
    # gravity in the phone's frame: along x when upright, tilted forward into z, rolled into y
    gravity = np.stack([np.cos(tilt) * np.cos(roll), np.sin(roll) * np.ones(n), np.sin(tilt) * np.cos(roll)], -1)
    # sensor noise and a slow sway, also when still (a person never is)
    noise = _noise(seed, ids, steps)
    sway = 0.02 * np.sin(2 * np.pi * (0.2 + 0.3 * u[:, 0:1]) * t[None] + 2 * np.pi * u[:, 1:2])
    body = body + 0.04 * noise[..., 0:3] + sway[..., None]
    gyro = gyro + 0.05 * noise[..., 3:6] + 0.5 * sway[..., None]
    total = body + gravity[:, None, :] + 0.01 * noise[..., 6:9]
    return np.concatenate([body, gyro, total], axis=-1).astype(np.float32)


def _noise(seed: int, ids: np.ndarray, steps: int) -> np.ndarray:
    return normals(seed, 22, ids, steps * 9).reshape(len(ids), steps, 9)
