// Conveniences the page works without: "select all" for the parked rows
// shown (notifications by id, site calls by key), and the selection buttons enabled only when something is selected.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("bulk");
  if (!form) return;
  const boxes = () => Array.from(form.querySelectorAll('input[name="id"], input[name="key"]'));
  const all = form.querySelector("[data-select-all]");
  const buttons = form.querySelectorAll("[data-needs-selection]");
  const sync = () => {
    const n = boxes().filter((b) => b.checked).length;
    buttons.forEach((b) => { b.disabled = n === 0; });
    if (all) all.checked = n > 0 && n === boxes().length;
  };
  if (all) all.addEventListener("change", () => { boxes().forEach((b) => { b.checked = all.checked; }); sync(); });
  form.addEventListener("change", sync);
  sync();
});
