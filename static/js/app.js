// Small enhancements that need no inline script (the CSP forbids it).
document.addEventListener("change", (event) => {
  const select = event.target.closest("select[data-autosubmit]");
  if (select && select.form) select.form.requestSubmit();
});

// The header's height, for the layout below it: it grows when the nav wraps.
(() => {
  const bar = document.querySelector(".topbar");
  if (!bar) return;
  const measure = () => {
    document.documentElement.style.setProperty("--topbar-height", `${bar.getBoundingClientRect().height}px`);
  };
  measure();
  if ("ResizeObserver" in window) new ResizeObserver(measure).observe(bar);
  else window.addEventListener("resize", measure);
})();
