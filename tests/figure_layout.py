"""Whether a matplotlib figure can be read, measured with matplotlib's own text extents after a draw: no two
texts overlap, every text lies inside the figure, and no legend covers a data line, a data point, a bar or a
text. Used by the plot tests on every bundled scenario's figures."""

from __future__ import annotations

import itertools

import numpy as np
from matplotlib.collections import LineCollection, PathCollection, PolyCollection
from matplotlib.legend import Legend
from matplotlib.patches import Patch
from matplotlib.path import Path
from matplotlib.text import Text
from matplotlib.transforms import Bbox

TOLERANCE_PIXELS = 0.5  # anti-aliased glyph edges may touch
DPI = 120  # what the report saves at


def layout_problems(figure) -> list[str]:
    """Every overlap found in `figure` drawn as the report saves it, as sentences naming the texts."""
    figure.set_dpi(DPI)
    figure.draw_without_rendering()
    renderer = figure.canvas.get_renderer()
    legends = [artist for artist in figure.findobj(Legend) if artist.get_visible()]
    in_legend = {id(text) for legend in legends for text in legend.findobj(Text)}
    blocks = [(repr(text.get_text()), text.get_window_extent(renderer), _outline(text, renderer))
              for text in _drawn_texts(figure) if id(text) not in in_legend]
    for legend in legends:
        box = legend.get_window_extent(renderer)
        blocks.append((f"legend {_legend_name(legend)}", box, _corners(box)))
    problems = []
    frame = figure.bbox
    for name, box, _ in blocks:
        if box.x0 < frame.x0 - 1 or box.y0 < frame.y0 - 1 or box.x1 > frame.x1 + 1 or box.y1 > frame.y1 + 1:
            problems.append(f"{name} runs off the figure ({_box(box)} in {_box(frame)})")
    for (first, one, one_outline), (second, other, other_outline) in itertools.combinations(blocks, 2):
        if _overlap(one, other) and _outlines_overlap(one_outline, other_outline):
            problems.append(f"{first} overlaps {second} ({_box(one)} and {_box(other)})")
    drawn = {id(text) for text in _drawn_texts(figure)}
    for axis in figure.axes:
        if not axis.get_visible():
            continue
        for which, name in ((axis.xaxis, "x"), (axis.yaxis, "y")):
            ticks = which._update_ticks()
            labelled = [label for label in which.get_ticklabels() if id(label) in drawn]
            if len(labelled) < min(2, len(ticks)) and (name == "x" or which.get_label_text()):
                problems.append(f"panel {axis.get_title()!r} labels {len(labelled)} of its {len(ticks)} {name} ticks")
    for legend in legends:
        box = legend.get_window_extent(renderer)
        for axis in figure.axes:
            covered = _covered_data(axis, box, renderer)
            if covered:
                problems.append(f"legend {_legend_name(legend)} covers {covered} of {axis.get_title()!r}")
    return problems


def _drawn_texts(figure) -> list[Text]:
    """The texts a draw puts on the figure: visible, not empty, tick labels only of ticks in view."""
    ticks = set()
    for axis in figure.axes:
        for which in (axis.xaxis, axis.yaxis):
            for tick in which._update_ticks():  # the ticks a draw shows: those in the view interval
                ticks.update(id(label) for label in (tick.label1, tick.label2) if label.get_visible())
    all_tick_labels = {id(label) for axis in figure.axes for which in (axis.xaxis, axis.yaxis)
                       for tick in which.get_major_ticks() + which.get_minor_ticks()
                       for label in (tick.label1, tick.label2)}
    texts = []
    for text in figure.findobj(Text):
        if not text.get_visible() or not text.get_text().strip():
            continue
        if id(text) in all_tick_labels and id(text) not in ticks:
            continue
        if not _shown_by_parents(text):
            continue
        texts.append(text)
    return texts


def _outline(text: Text, renderer) -> np.ndarray:
    """The corners of the rectangle a text's glyphs fill: its extent, or for a slanted text (a tick label at
    45 degrees) the rotated rectangle inside that extent, one line high."""
    box = text.get_window_extent(renderer)
    angle = text.get_rotation() % 180
    if min(angle % 90, 90 - angle % 90) < 1 or "\n" in text.get_text():
        return _corners(box)
    _, height, _ = renderer.get_text_width_height_descent("lp", text.get_fontproperties(), ismath=False)
    mirrored = angle > 90
    theta = np.radians(180 - angle if mirrored else angle)
    width = (box.width - height * np.sin(theta)) / np.cos(theta)
    corners = np.array([(height * np.sin(theta), 0.0), (height * np.sin(theta) + width * np.cos(theta),
                        width * np.sin(theta)), (width * np.cos(theta), box.height), (0.0, height * np.cos(theta))])
    if mirrored:
        corners[:, 0] = box.width - corners[:, 0]
    return corners + (box.x0, box.y0)


def _corners(box: Bbox) -> np.ndarray:
    return np.array([(box.x0, box.y0), (box.x1, box.y0), (box.x1, box.y1), (box.x0, box.y1)])


def _outlines_overlap(one: np.ndarray, other: np.ndarray) -> bool:
    """Two convex outlines overlap unless an edge's normal separates them (by more than the tolerance)."""
    for outline in (one, other):
        for start, end in zip(outline, np.roll(outline, -1, axis=0)):
            normal = np.array([start[1] - end[1], end[0] - start[0]])
            length = np.hypot(*normal)
            if length == 0:
                continue
            first, second = one @ normal / length, other @ normal / length
            if min(first.max(), second.max()) - max(first.min(), second.min()) <= TOLERANCE_PIXELS:
                return False
    return True


def _shown_by_parents(text: Text) -> bool:
    axes = text.axes
    return axes is None or axes.get_visible()


def _overlap(one: Bbox, other: Bbox) -> bool:
    return (min(one.x1, other.x1) - max(one.x0, other.x0) > TOLERANCE_PIXELS
            and min(one.y1, other.y1) - max(one.y0, other.y0) > TOLERANCE_PIXELS)


def _covered_data(axis, box: Bbox, renderer) -> str | None:
    """What of `axis`'s data `box` covers (data is clipped to the axes, so only their common part counts)."""
    area = Bbox.intersection(box, axis.bbox)
    if area is None or area.width <= TOLERANCE_PIXELS or area.height <= TOLERANCE_PIXELS:
        return None
    area = area.expanded(1.0, 1.0)
    for line in axis.lines:
        if not line.get_visible():
            continue
        points = line.get_transform().transform(np.asarray(line.get_xydata(), dtype=float))
        points = points[np.isfinite(points).all(axis=1)]
        if len(points) == 0:
            continue
        if line.get_linestyle() not in ("None", "none", "", " ") and len(points) > 1:
            if Path(points).intersects_bbox(area, filled=False):
                return f"line {line.get_label()!r}"
        if line.get_marker() not in (None, "None", "none", "", " "):
            if _any_inside(points, area.expanded(1.0, 1.0).padded(line.get_markersize() * DPI / 144)):
                return f"markers of {line.get_label()!r}"
    for collection in axis.collections:
        if not collection.get_visible():
            continue
        if isinstance(collection, PathCollection):  # scatter
            points = collection.get_offset_transform().transform(collection.get_offsets())
            if _any_inside(points, area.padded(3)):
                return f"points of {collection.get_label()!r}"
        elif isinstance(collection, (LineCollection, PolyCollection)):
            transform = collection.get_transform()
            for path in collection.get_paths():
                if transform.transform_path(path).intersects_bbox(area, filled=isinstance(collection, PolyCollection)):
                    return f"{type(collection).__name__} {collection.get_label()!r}"
    for patch in axis.patches:
        if isinstance(patch, Patch) and patch.get_visible():
            path = patch.get_transform().transform_path(patch.get_path())
            if path.intersects_bbox(area, filled=patch.get_fill()):
                return f"{type(patch).__name__} {patch.get_label()!r}"
    for text in _drawn_texts_of(axis):
        if _overlap(text.get_window_extent(renderer), area):
            return f"text {text.get_text()!r}"
    return None


def _drawn_texts_of(axis) -> list[Text]:
    return [text for text in axis.texts if text.get_visible() and text.get_text().strip()]


def _any_inside(points: np.ndarray, box: Bbox) -> bool:
    return bool(((points[:, 0] >= box.x0) & (points[:, 0] <= box.x1)
                 & (points[:, 1] >= box.y0) & (points[:, 1] <= box.y1)).any())


def _legend_name(legend: Legend) -> str:
    texts = [text.get_text() for text in legend.get_texts()]
    return repr(texts[:2] + (["..."] if len(texts) > 2 else []))


def _box(box: Bbox) -> str:
    return f"[{box.x0:.0f}, {box.y0:.0f}, {box.x1:.0f}, {box.y1:.0f}]"
