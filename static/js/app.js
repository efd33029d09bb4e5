// Small enhancements that need no inline script (the CSP forbids it).

// A select[data-autosubmit] (the org switcher) submits when a choice is made with the mouse.
// With the keyboard, arrows, Home/End, Page keys and type-ahead only move the selection
// (WCAG 3.2.2): Enter submits it, and leaving the select puts back the current choice.
(() => {
  const NAVIGATION_KEYS = ["ArrowUp", "ArrowDown", "ArrowLeft", "ArrowRight", "Home", "End", "PageUp", "PageDown"];
  const autosubmit = (target) => target?.closest?.("select[data-autosubmit]");
  const current = (select) => [...select.options].find((o) => o.defaultSelected)?.value ?? select.options[0]?.value;
  let browsing = null; // the select whose selection the keyboard is moving

  document.addEventListener("keydown", (event) => {
    const select = autosubmit(event.target);
    if (!select) return;
    if (event.key === "Enter") {
      event.preventDefault();
      browsing = null;
      if (select.value !== current(select) && select.form) select.form.requestSubmit();
      return;
    }
    // Alt+arrows and Space open the list; choosing in it is like choosing with the mouse.
    if ((NAVIGATION_KEYS.includes(event.key) && event.altKey) || event.key === " ") browsing = null;
    else if (NAVIGATION_KEYS.includes(event.key)
      || (event.key.length === 1 && !event.ctrlKey && !event.metaKey && !event.altKey)) browsing = select;
  });
  document.addEventListener("pointerdown", (event) => {
    if (autosubmit(event.target)) browsing = null;
  });
  document.addEventListener("change", (event) => {
    const select = autosubmit(event.target);
    if (select && select !== browsing && select.form) select.form.requestSubmit();
  });
  document.addEventListener("focusout", (event) => {
    const select = autosubmit(event.target);
    if (!select || browsing !== select) return;
    browsing = null;
    select.value = current(select);
  });
})();

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

// A button[data-copy="#id"] copies that element's text (a new API key, an invitation link).
// Without the clipboard API (plain http on another host) the button stays hidden: the text
// can still be selected and copied by hand.
(() => {
  const reveal = () => {
    if (!navigator.clipboard) return;
    document.querySelectorAll("button[data-copy][hidden]").forEach((b) => { b.hidden = false; });
  };
  reveal();
  document.addEventListener("htmx:after:settle", reveal);
  document.addEventListener("click", async (event) => {
    const button = event.target.closest?.("button[data-copy]");
    if (!button) return;
    const source = document.querySelector(button.dataset.copy);
    if (!source) return;
    try {
      await navigator.clipboard.writeText(source.textContent.trim());
      button.textContent = "Copied";
    } catch (e) {
      button.textContent = "Copy failed: select the text instead";
    }
  });
})();

// A select[data-fills-base-url] (the AI provider) puts its option's default base URL into
// the field it names, unless that field holds an address someone typed.
(() => {
  document.addEventListener("change", (event) => {
    const select = event.target.closest?.("select[data-fills-base-url]");
    if (!select) return;
    const field = document.querySelector(select.dataset.fillsBaseUrl);
    if (!field) return;
    const defaults = [...select.options].map((o) => o.dataset.baseUrl).filter(Boolean);
    if (field.value && !defaults.includes(field.value)) return;
    field.value = select.selectedOptions[0]?.dataset.baseUrl || "";
  });
})();

// A form sent back with errors: focus its first invalid field, so keyboard and screen
// reader users land on what to fix (on a page load, and when htmx swaps the answer in).
(() => {
  const focusFirstError = (root) => {
    const field = (root || document).querySelector?.("form [aria-invalid='true']");
    if (field && !field.closest("[hidden]") && !field.closest("#assistant")) field.focus();
  };
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", () => focusFirstError(document.querySelector("main")));
  } else {
    focusFirstError(document.querySelector("main"));
  }
  document.addEventListener("htmx:after:settle", (event) => {
    const target = event.target instanceof Element ? event.target : null;
    if (target && !target.closest("#assistant")) focusFirstError(target);
  });
})();

// The records toolbar: add a filter row from its template, remove one (and apply at once).
// Without script, an empty row is always there and clearing a row's field removes it.
(() => {
  const show = (root) => {
    root.querySelectorAll?.(".records-toolbar .add-filter, .records-toolbar .remove-filter")
      .forEach((button) => { button.hidden = false; });
  };
  show(document);
  document.addEventListener("htmx:after:settle", (event) => show(event.target));
  document.addEventListener("click", (event) => {
    const button = event.target instanceof Element ? event.target.closest("button") : null;
    const form = button?.closest(".records-toolbar");
    if (!form) return;
    if (button.classList.contains("add-filter")) {
      const template = form.querySelector("#filter-row-template");
      const row = template.content.firstElementChild.cloneNode(true);
      row.querySelector(".remove-filter").hidden = false;
      button.before(row);
      row.querySelector("select").focus();
    } else if (button.classList.contains("remove-filter")) {
      const row = button.closest(".filter-row");
      const next = row.nextElementSibling?.querySelector("select") || form.querySelector("#q");
      row.remove();
      next?.focus();
      form.requestSubmit();
    }
  });
})();

// A request the server could not serve just then (503: its database did not answer) is
// answered with a notice holding button[data-retry]. Retry sends that request again as it
// was first sent: a form with the same button (so a card's Confirm confirms that card, and
// the composer sends the text it was given back), anything else to the same address.
(() => {
  const again = new WeakMap(); // Retry button → the request that drew it
  document.addEventListener("htmx:after:swap", (event) => {
    const ctx = event.detail?.ctx;
    if (ctx?.response?.status !== 503) return;
    const sent = {
      source: ctx.sourceElement,
      submitter: ctx.sourceEvent?.submitter,
      method: ctx.request?.method || "GET",
      action: ctx.request?.action,
      target: ctx.target,
      swap: ctx.swap,
    };
    document.querySelectorAll("button[data-retry]").forEach((button) => {
      if (!again.has(button)) again.set(button, sent);
    });
  });
  document.addEventListener("click", (event) => {
    const button = event.target.closest?.("button[data-retry]");
    if (!button) return;
    const sent = again.get(button);
    if (!sent) { location.reload(); return; } // drawn by a page load: load it again
    button.disabled = true;
    const {source, submitter} = sent;
    if (source?.isConnected && source.matches("form")) {
      source.requestSubmit(submitter?.isConnected && submitter.form === source ? submitter : undefined);
    } else if (sent.action && sent.target?.isConnected) {
      htmx.ajax(sent.method, sent.action, {target: sent.target, swap: sent.swap});
    } else {
      location.reload();
    }
  });
})();

// The records toolbar after an htmx answer: the toolbar is not redrawn, so a refused row's
// message (the answer's #filter-error names the row and control) is put beside it here; and
// a date field's value box asks for YYYY-MM-DD.
(() => {
  const controls = { field: "[name=ff]", op: "[name=fo]", value: "[name=fv]" };
  const markRefusedRow = () => {
    const form = document.querySelector(".records-toolbar");
    if (!form) return;
    form.querySelectorAll(".filter-row-error").forEach((p) => p.remove());
    form.querySelectorAll(".filter-row.has-error").forEach((row) => row.classList.remove("has-error"));
    form.querySelectorAll(".filter-row [aria-invalid]").forEach((control) => {
      control.removeAttribute("aria-invalid");
      control.removeAttribute("aria-describedby");
    });
    const error = document.querySelector("#filter-error[data-row]");
    if (!error) return;
    // The rows the server counted: those with a field or a value.
    const rows = [...form.querySelectorAll(".filters > .filter-row")].filter((row) =>
      row.querySelector("[name=ff]").value.trim() || row.querySelector("[name=fv]").value.trim());
    const row = rows[Number(error.dataset.row)];
    const control = row?.querySelector(controls[error.dataset.part] || "[name=fv]");
    if (!control) {
      error.classList.remove("visually-hidden");
      return;
    }
    const message = document.createElement("p");
    message.className = "error filter-row-error";
    message.id = "filter-row-error";
    message.textContent = error.dataset.message;
    row.classList.add("has-error");
    row.append(message);
    control.setAttribute("aria-invalid", "true");
    control.setAttribute("aria-describedby", message.id);
  };
  document.addEventListener("htmx:after:swap", markRefusedRow);
  document.addEventListener("change", (event) => {
    const select = event.target.closest?.(".records-toolbar select[name=ff]");
    const value = select?.closest(".filter-row")?.querySelector("[name=fv]");
    if (!value) return;
    value.placeholder = select.selectedOptions[0]?.dataset.type === "date" ? "YYYY-MM-DD" : "value";
  });
})();

// A save's message shows in the section saved (``section_flashes``): bring that section into
// view, after a full page load as after a boosted form's swap (whose answer keeps no anchor).
(() => {
  const revealSaved = (root) => {
    const said = root?.querySelector?.(".section-flashes");
    said?.closest("section")?.scrollIntoView({ block: "start" });
  };
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", () => revealSaved(document.querySelector("main")));
  } else {
    revealSaved(document.querySelector("main"));
  }
  document.addEventListener("htmx:after:settle", (event) => {
    const target = event.target instanceof Element ? event.target : null;
    // After htmx's own scroll to the top of a boosted answer.
    if (target && !target.closest("#assistant")) setTimeout(() => revealSaved(document.querySelector("main")));
  });
})();

// The header's bell asks for its count every NOTIFICATIONS_POLL (its data-poll-seconds)
// while the tab is visible, and at once when it shows again: a hidden tab asks nothing.
// htmx listens for "poll-notifications" on the bell (hx-trigger), so no inline script runs.
(() => {
  const bell = () => document.getElementById("notifications-bell");
  const first = bell();
  if (!first) return;
  const seconds = Math.max(Number(first.dataset.pollSeconds) || 30, 0.5);
  const poll = () => {
    const current = bell();
    if (current && document.visibilityState === "visible") {
      current.dispatchEvent(new CustomEvent("poll-notifications"));
    }
  };
  setInterval(poll, seconds * 1000);
  document.addEventListener("visibilitychange", poll);
  // Opening a notification, or marking all read, changes the count: ask again at once (the
  // answer, a page swapped into #main, leaves the header's bell as it was).
  document.addEventListener("htmx:after:request", (event) => {
    const form = event.detail?.ctx?.sourceElement?.closest?.("form");
    if (form?.getAttribute("action")?.startsWith("/notifications")) poll();
  });
})();
