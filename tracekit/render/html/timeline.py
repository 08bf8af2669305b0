"""The step timeline on the page: a lane per row (the step, its blocks or layers, each GPU stream, the AllGathers,
the exposed time), and the inline script that zooms and pans it (no network)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..colors import picture_colors
from .svg import CHART_W, legend
from .tables import esc

FIXED_LANES = ("step", "exposed")  # lanes drawn in their own fixed colour, whatever their label


def step_timeline_svg(tl: pd.DataFrame, *, zoom: bool = True) -> str:
    """The lanes of one step (tracekit.analyses.time.timeline): a row per lane, each interval a rectangle coloured by its
    label, exposed AllGather time red; hovering names it. With ``zoom`` (the page; a notebook has no script) the
    plot is its own SVG whose view box the page's script narrows and moves: the wheel zooms around the pointer,
    dragging pans, the buttons zoom in, out and back; the lane names and the time axis stay put (the axis is
    rewritten for the view)."""
    if tl.empty:
        return ""
    s0, s1 = int(tl["start_ns"].min()), int(tl["end_ns"].max())
    span = max(1, s1 - s0)
    lanes = list(dict.fromkeys(tl["lane"]))
    labels = list(dict.fromkeys(tl.loc[~tl["lane"].isin(FIXED_LANES), "label"].astype(str)))
    colors = picture_colors(labels, fixed=[x for x in FIXED_LANES if (tl["lane"] == x).any()])
    label_w, lane_h, gap = 150, 16, 4
    plot_w = CHART_W - label_w - 10
    h = len(lanes) * (lane_h + gap) + 4
    names = [f'<svg class="tl-names" viewBox="0 0 {label_w} {h}" width="{label_w}" height="{h}">']
    plot = [
        f'<svg class="tl-plot" viewBox="0 0 {plot_w} {h}" width="{plot_w}" height="{h}" '
        f'preserveAspectRatio="none" role="img" data-span-ns="{span}">'
    ]
    for i, lane in enumerate(lanes):
        y = 4 + i * (lane_h + gap)
        names.append(
            f'<text x="{label_w - 6}" y="{y + 12}" text-anchor="end">{esc(lane)}<title>{esc(lane)}</title></text>'
        )
        d = tl[tl["lane"] == lane]
        for label, g in d.groupby("label", sort=True):
            fill = colors[lane] if lane in FIXED_LANES else colors[str(label)]
            a = g["start_ns"].to_numpy(np.int64) - s0
            b = g["end_ns"].to_numpy(np.int64) - s0
            xs = a / span * plot_w
            ws = np.maximum((b - a) / span * plot_w, 0.3)
            rects = "".join(
                f'<rect x="{x:.3f}" y="{y}" width="{w:.3f}" height="{lane_h}"/>'
                for x, w in zip(xs.tolist(), ws.tolist())
            )
            total = int((b - a).sum())
            edge = (
                ' stroke="#fff" stroke-width="1" vector-effect="non-scaling-stroke"'
                if lane in ("layers", "blocks")
                else ""
            )  # neighbouring layers of one type stay apart
            plot.append(
                f'<g fill="{fill}"{edge}><title>{esc(lane)} · {esc(label)}: {len(g):,} interval(s), '
                f"{total / 1e6:,.3f} ms</title>{rects}</g>"
            )
    names.append("</svg>")
    plot.append("</svg>")
    anchor = ["start", "middle", "middle", "middle", "middle", "end"]  # the first and last tick stay inside
    ticks = "".join(
        f'<text x="{k / 5 * plot_w:.1f}" y="14" text-anchor="{anchor[k]}">+{span * k / 5 / 1e6:,.2f} ms</text>'
        for k in range(6)
    )
    axis = (
        f'<svg class="tl-axis" viewBox="0 0 {plot_w} 20" width="{plot_w}" height="20" data-span-ns="{span}">'
        f"{ticks}</svg>"
    )
    controls = (
        (
            '<div class="tl-ctl"><button type="button" data-zoom="in">zoom in</button>'
            '<button type="button" data-zoom="out">zoom out</button>'
            '<button type="button" data-zoom="reset">whole step</button>'
            '<span class="note"> wheel over the lanes: zoom around the pointer · drag: pan</span></div>'
        )
        if zoom
        else ""
    )
    key = legend(labels[:40] + (["exposed"] if (tl["lane"] == "exposed").any() else []), colors)
    return (
        f'<div class="timeline">{controls}<div class="tl-row">{"".join(names)}<div class="tl-view">'
        f"{''.join(plot)}{axis}</div></div>{key}</div>"
    )


TIMELINE_JS = """
function tkTimeline(el){
  var plot=el.querySelector('svg.tl-plot'),axis=el.querySelector('svg.tl-axis');if(!plot)return;
  var vb=plot.viewBox.baseVal,W=vb.width,H=vb.height,span=parseFloat(plot.getAttribute('data-span-ns'));
  function set(x,w){w=Math.max(W/2000,Math.min(W,w));x=Math.max(0,Math.min(W-w,x));
    plot.setAttribute('viewBox',x+' 0 '+w+' '+H);
    if(axis){var t=axis.querySelectorAll('text');for(var k=0;k<t.length;k++){
      var ms=(x+w*k/(t.length-1))/W*span/1e6;t[k].textContent='+'+ms.toFixed(ms<1?4:ms<100?3:2)+' ms';}}}
  function zoom(f,frac){var x=vb.x,w=vb.width,c=x+w*(frac==null?0.5:frac);set(c-(c-x)/f,w/f);}
  el.tkZoom=zoom;el.tkSet=set;
  plot.addEventListener('wheel',function(e){e.preventDefault();var r=plot.getBoundingClientRect();
    zoom(e.deltaY<0?1.5:1/1.5,(e.clientX-r.left)/Math.max(r.width,1));},{passive:false});
  var drag=null;
  plot.addEventListener('mousedown',function(e){drag={x:e.clientX,vx:vb.x};e.preventDefault();});
  window.addEventListener('mousemove',function(e){if(!drag)return;var r=plot.getBoundingClientRect();
    set(drag.vx-(e.clientX-drag.x)/Math.max(r.width,1)*vb.width,vb.width);});
  window.addEventListener('mouseup',function(){drag=null;});
  el.querySelectorAll('button[data-zoom]').forEach(function(b){b.addEventListener('click',function(){
    var z=b.getAttribute('data-zoom');if(z==='in')zoom(2);else if(z==='out')zoom(0.5);else set(0,W);});});
}
document.querySelectorAll('.timeline').forEach(tkTimeline);
"""
