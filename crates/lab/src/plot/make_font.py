#!/usr/bin/env python3
"""Make DejaVuSans-lab.ttf, the font `plot` bundles for PNG text.

What it does: takes Debian's DejaVu Sans (fonts-dejavu-core,
/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf), keeps printable ASCII and
the few symbols the charts use (degree, micro, middle dot, times, en and em
dashes, ellipsis, <= and >=), drops hinting (23 KB instead of 740 KB), and
works around a bug of plotters 0.3.7's ab_glyph text drawing.

The bug: plotters draws each glyph's bitmap starting at the pen position,
forgetting the glyph's left side bearing (the bitmap's offset from the pen),
so letters with a wide bearing (H, i, m, b) huddle against the previous one
and the spacing of a word looks uneven. The fix here: give every outlined
glyph an extra one-point contour at x = 0. A one-point contour encloses no
area, so nothing more is drawn, but it stretches the glyph's bounding box to
the pen position, so the bitmap plotters places at the pen now starts where
the glyph's origin really is. (Glyphs that reach left of the pen, like j,
keep their small negative bearing uncorrected.)

Run once, with fontTools (pip install fonttools), from this directory:
    python3 make_font.py /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf
The result is committed; the build never runs this script.
"""

import sys

from fontTools import subset
from fontTools.pens.recordingPen import DecomposingRecordingPen
from fontTools.pens.ttGlyphPen import TTGlyphPen
from fontTools.ttLib import TTFont

UNICODES = (
    list(range(0x20, 0x7F))
    + [0xB0, 0xB5, 0xB7, 0xD7, 0x2013, 0x2014, 0x2026, 0x2264, 0x2265]
)


def main(src, dst="DejaVuSans-lab.ttf"):
    font = TTFont(src)
    opts = subset.Options()
    opts.hinting = False
    opts.layout_features = ["kern"]
    opts.drop_tables += ["GSUB", "FFTM"]
    opts.name_IDs = ["*"]
    sub = subset.Subsetter(opts)
    sub.populate(unicodes=UNICODES)
    sub.subset(font)

    glyf = font["glyf"]
    hmtx = font["hmtx"]
    glyph_set = font.getGlyphSet()
    for name in font.getGlyphOrder():
        g = glyf[name]
        if g.numberOfContours == 0:
            continue  # no outline (space): nothing is drawn, nothing to fix
        # Decompose composite glyphs so the extra contour can be added.
        rec = DecomposingRecordingPen(glyph_set)
        glyph_set[name].draw(rec)
        pen = TTGlyphPen(None)
        rec.replay(pen)
        g.recalcBounds(glyf)
        y = g.yMin
        # moveTo alone makes TTGlyphPen drop the contour; a lineTo back to
        # the same point leaves exactly one point once closePath removes the
        # duplicate.
        pen.moveTo((0, y))
        pen.lineTo((0, y))
        pen.closePath()
        new = pen.glyph()
        new.recalcBounds(glyf)
        glyf[name] = new
        adv, _ = hmtx[name]
        hmtx[name] = (adv, new.xMin)
    font.save(dst)


if __name__ == "__main__":
    main(*sys.argv[1:])
