"""Small numpy drawing helpers shared by the grid tasks' ``render_rgb`` functions.

Images are ``uint8`` arrays of shape ``(height, width, 3)``. No fonts, no pygame: text
is drawn with a built-in 3x5 bitmap font scaled to the cell size.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Color", "FONT_3X5", "new_canvas", "fill_cell", "fill_rect", "draw_glyph",
           "draw_text_in_cell", "draw_grid_lines"]

Color = tuple[int, int, int]

#: 3 columns x 5 rows glyphs; '#' is ink.
FONT_3X5: dict[str, tuple[str, ...]] = {
    "0": ("###", "#.#", "#.#", "#.#", "###"),
    "1": (".#.", "##.", ".#.", ".#.", "###"),
    "2": ("###", "..#", "###", "#..", "###"),
    "3": ("###", "..#", "###", "..#", "###"),
    "4": ("#.#", "#.#", "###", "..#", "..#"),
    "5": ("###", "#..", "###", "..#", "###"),
    "6": ("###", "#..", "###", "#.#", "###"),
    "7": ("###", "..#", ".#.", ".#.", ".#."),
    "8": ("###", "#.#", "###", "#.#", "###"),
    "9": ("###", "#.#", "###", "..#", "###"),
    "A": (".#.", "#.#", "###", "#.#", "#.#"),
    "B": ("##.", "#.#", "##.", "#.#", "##."),
    "C": (".##", "#..", "#..", "#..", ".##"),
    "D": ("##.", "#.#", "#.#", "#.#", "##."),
    "E": ("###", "#..", "##.", "#..", "###"),
    "F": ("###", "#..", "##.", "#..", "#.."),
    "G": (".##", "#..", "#.#", "#.#", ".##"),
}

_GLYPH_MASKS: dict[str, np.ndarray] = {
    ch: np.array([[c == "#" for c in row] for row in rows], dtype=bool)
    for ch, rows in FONT_3X5.items()
}


def new_canvas(rows: int, cols: int, cell: int, color: Color = (255, 255, 255)) -> np.ndarray:
    """A ``(rows*cell, cols*cell, 3)`` uint8 image filled with ``color``."""
    if cell < 1 or rows < 0 or cols < 0:
        raise ValueError(f"bad canvas size rows={rows} cols={cols} cell={cell}")
    img = np.empty((rows * cell, cols * cell, 3), dtype=np.uint8)
    img[:] = color
    return img


def fill_rect(img: np.ndarray, y0: int, x0: int, y1: int, x1: int, color: Color) -> None:
    """Fill pixels ``[y0:y1, x0:x1]`` (clipped by numpy slicing) with ``color``."""
    img[max(y0, 0):max(y1, 0), max(x0, 0):max(x1, 0)] = color


def fill_cell(img: np.ndarray, r: int, c: int, cell: int, color: Color, margin: int = 0) -> None:
    """Fill grid cell ``(r, c)`` of size ``cell`` pixels, leaving ``margin`` pixels each side."""
    fill_rect(img, r * cell + margin, c * cell + margin,
              (r + 1) * cell - margin, (c + 1) * cell - margin, color)


def draw_glyph(img: np.ndarray, y: int, x: int, ch: str, scale: int, color: Color) -> None:
    """Draw character ``ch`` of :data:`FONT_3X5` with its top-left at ``(y, x)``.

    Each font pixel becomes a ``scale`` x ``scale`` block. Unknown characters raise
    ``KeyError`` naming the character set.
    """
    mask = _GLYPH_MASKS.get(ch.upper())
    if mask is None:
        raise KeyError(f"no glyph for {ch!r}; available: {''.join(sorted(FONT_3X5))}")
    big = np.kron(mask, np.ones((scale, scale), dtype=bool))
    h, w = big.shape
    region = img[y:y + h, x:x + w]
    region[big[:region.shape[0], :region.shape[1]]] = color


def draw_text_in_cell(img: np.ndarray, r: int, c: int, cell: int, text: str, color: Color) -> None:
    """Draw ``text`` (one or more glyphs) centred in cell ``(r, c)``, scaled to fit."""
    n = len(text)
    if n == 0:
        return
    width_units = 4 * n - 1
    scale = max(1, min((cell - 2) // width_units, (cell - 2) // 5))
    tw, th = width_units * scale, 5 * scale
    y = r * cell + (cell - th) // 2
    x = c * cell + (cell - tw) // 2
    for i, ch in enumerate(text):
        draw_glyph(img, y, x + i * 4 * scale, ch, scale, color)


def draw_grid_lines(img: np.ndarray, cell: int, color: Color, every: int = 1,
                    thickness: int = 1) -> None:
    """Draw horizontal and vertical lines on every ``every``-th cell boundary."""
    h, w = img.shape[:2]
    for y in range(0, h + 1, cell * every):
        fill_rect(img, min(y, h - thickness), 0, min(y, h - thickness) + thickness, w, color)
    for x in range(0, w + 1, cell * every):
        fill_rect(img, 0, min(x, w - thickness), h, min(x, w - thickness) + thickness, color)
