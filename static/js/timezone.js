// The browser's own time zone (a file, not an inline script: the CSP forbids those).
//
// At first sign-in (the body carries data-time-zone-url only while the user has no zone),
// the browser's zone is sent once; the server keeps it only if the user still has none.
// On the profile, a button offers the browser's zone for the time-zone field.
(() => {
  const browserZone = () => {
    try {
      return Intl.DateTimeFormat().resolvedOptions().timeZone || "";
    } catch (err) {
      return "";
    }
  };
  const csrf = () => document.querySelector('meta[name="csrf-token"]')?.content || "";

  const adopt = () => {
    const url = document.body?.dataset.timeZoneUrl;
    const zone = browserZone();
    if (!url || !zone) return;
    delete document.body.dataset.timeZoneUrl; // once per page load, whatever the answer
    fetch(url, {
      method: "POST",
      headers: {"X-CSRFToken": csrf(), "Content-Type": "application/x-www-form-urlencoded"},
      body: new URLSearchParams({time_zone: zone}),
      credentials: "same-origin",
    })
      .then((response) => response.json())
      // Whether it was kept, for whoever looks (a test; the next full page shows it anyway).
      .then((answer) => { document.body.dataset.timeZoneKept = String(Boolean(answer.kept)); })
      .catch(() => {});
  };

  const offer = () => {
    const zone = browserZone();
    document.querySelectorAll("button[data-use-browser-zone][hidden]").forEach((button) => {
      const field = document.getElementById(button.dataset.useBrowserZone);
      if (!zone || !field) return;
      button.querySelector("[data-zone]").textContent = zone;
      button.hidden = false;
    });
  };

  document.addEventListener("click", (event) => {
    const button = event.target.closest?.("button[data-use-browser-zone]");
    if (!button) return;
    const field = document.getElementById(button.dataset.useBrowserZone);
    if (field) {
      field.value = browserZone();
      field.focus();
    }
  });
  const start = () => { adopt(); offer(); };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
  document.addEventListener("htmx:after:settle", offer);
})();
