"""The full run name over a shortened one: hovering a row of the overview's table shows its run's whole name.

Streamlit's table draws on a canvas and shows no tooltip for a cell, so a small component (JavaScript only,
mounted in the page itself) does: it reads which row the pointer is over from the table's geometry (a header
and rows of ROW_PX, the name column first and `name_px` wide with the row-selection boxes, the table's
scroll) and that row's full name from the table's own accessible copy of its cells (each cell's value in full,
in the table's order, its own sort included), and shows it in a box under the row. Names of `chars`
characters or fewer are shown whole in the table, so they get no box. A person who drags the name column
wider moves its edge: the box then shows over the column's first `name_px` pixels only.
"""

from __future__ import annotations

from streamlit.components.v2 import component

ROW_PX = 35  # the table's row and header height (Streamlit's default, set explicitly on the table)

# `data`: key (the table's widget key), column (the name column's label), row_px, name_px, chars.
_JS = """
export default function (component) {
  const { data } = component;
  if (!data) return;
  const box = document.createElement('div');
  box.setAttribute('role', 'tooltip');
  box.dataset.testid = 'runwatchFullName';
  Object.assign(box.style, {
    position: 'fixed', display: 'none', zIndex: 1000, maxWidth: '60rem', padding: '0.4rem 0.6rem',
    background: 'white', color: 'rgb(49, 51, 63)', border: '1px solid rgba(49, 51, 63, 0.2)',
    borderRadius: '0.5rem', boxShadow: '0 1px 4px rgba(0, 0, 0, 0.16)', fontSize: '14px',
    fontFamily: '"Source Sans", sans-serif', wordBreak: 'break-all', pointerEvents: 'none',
  });
  document.body.appendChild(box);
  const hide = () => { box.style.display = 'none'; };
  const fullName = (table, row) => {
    const header = [...table.querySelectorAll('th')].find((th) => th.textContent === data.column);
    if (!header) return null;
    const col = header.getAttribute('aria-colindex');
    const cell = table.querySelector(`tr[aria-rowindex="${row + 2}"] td[aria-colindex="${col}"]`);
    return cell ? cell.textContent : null;
  };
  const move = (event) => {
    const frame = document.querySelector(`.st-key-${data.key} [data-testid="stDataFrame"]`);
    const canvas = frame && frame.querySelector('canvas[data-testid="data-grid-canvas"]');
    if (!canvas || !frame.contains(event.target)) { hide(); return; }
    const rect = canvas.getBoundingClientRect();  // (the pointer is over the grid's scroll layer, not the canvas)
    if (event.clientX < rect.left || event.clientX > rect.right || event.clientY > rect.bottom) { hide(); return; }
    const scroller = frame.querySelector('.dvn-scroller');
    const y = event.clientY - rect.top - data.row_px + (scroller ? scroller.scrollTop : 0);
    const x = event.clientX - rect.left + (scroller ? scroller.scrollLeft : 0);
    if (y < 0 || x > data.name_px) { hide(); return; }
    const row = Math.floor(y / data.row_px);
    const name = fullName(canvas, row);
    if (!name || name.length <= data.chars) { hide(); return; }
    box.textContent = name;
    const top = rect.top + data.row_px * (row + 2) - (scroller ? scroller.scrollTop : 0);
    box.style.left = `${rect.left + 8}px`;
    box.style.top = `${top + 2}px`;
    box.style.display = 'block';
  };
  document.addEventListener('mousemove', move, true);
  document.addEventListener('scroll', hide, true);
  return () => {
    document.removeEventListener('mousemove', move, true);
    document.removeEventListener('scroll', hide, true);
    box.remove();
  };
}
"""

_hover = component("runwatch_name_hover", js=_JS)


def full_names_on_hover(key: str, column: str, name_px: int, chars: int) -> None:
    """Show the full value of `column` (shortened past `chars` characters) when a row of the table with
    widget key `key` is hovered over its first `name_px` pixels."""
    _hover(
        key=f"{key}-hover",
        data={"key": key, "column": column, "row_px": ROW_PX, "name_px": name_px, "chars": chars},
        height=0,
    )
