// The header's search: Ctrl+K / Cmd+K focuses it; while it is focused the arrows move
// through the list htmx draws under it, Enter opens the chosen result (or, with none chosen,
// the results page), Esc closes the list. A conversation opens in the assistant panel.
(() => {
  const input = () => document.getElementById("search-q");
  const popup = () => document.getElementById("search-popup");
  const options = () => [...(popup()?.querySelectorAll('[role="option"]') || [])];
  // Esc closed the list: an answer still on its way for what was typed does not open it
  // again; typing, the arrows or Ctrl+K do.
  let dismissed = false;

  function show(open) {
    const list = popup();
    if (!list || !input()) return;
    if (open) dismissed = false;
    list.hidden = !open;
    input().setAttribute("aria-expanded", String(open));
    if (!open) choose(null);
  }

  function choose(option) {
    for (const o of options()) o.setAttribute("aria-selected", String(o === option));
    if (option) {
      input().setAttribute("aria-activedescendant", option.id);
      option.scrollIntoView({block: "nearest"});
    } else {
      input()?.removeAttribute("aria-activedescendant");
    }
  }

  function move(step) {
    const all = options();
    if (!all.length) return;
    if (popup().hidden) show(true);
    const at = all.findIndex((o) => o.getAttribute("aria-selected") === "true");
    const next = at < 0 ? (step > 0 ? 0 : all.length - 1) : (at + step + all.length) % all.length;
    choose(all[next]);
  }

  function openConversation(link) {
    const aside = document.getElementById("assistant");
    if (aside?.hidden) document.getElementById("assistant-toggle")?.click();
    htmx.ajax("GET", link.getAttribute("href"), {target: "#chat-screen", swap: "innerHTML"});
  }

  function open(link) {
    show(false);
    if (link.hasAttribute("data-conversation")) openConversation(link);
    else link.click();
  }

  document.addEventListener("keydown", (event) => {
    if ((event.ctrlKey || event.metaKey) && !event.altKey && event.key.toLowerCase() === "k") {
      const box = input();
      if (!box) return;
      event.preventDefault();
      box.focus();
      box.select();
      if (box.value && options().length) show(true);
      return;
    }
    if (event.target !== input()) return;
    if (event.key === "ArrowDown" || event.key === "ArrowUp") {
      event.preventDefault();
      move(event.key === "ArrowDown" ? 1 : -1);
    } else if (event.key === "Escape") {
      if (!popup().hidden) {
        event.preventDefault();
        show(false);
        dismissed = true;
      } else {
        input().blur();
      }
    } else if (event.key === "Enter") {
      const chosen = options().find((o) => o.getAttribute("aria-selected") === "true");
      if (chosen && !popup().hidden) {
        event.preventDefault();
        open(chosen);
      }
    }
  });

  // A conversation's link loads the panel's thread instead of leaving the page.
  document.addEventListener("click", (event) => {
    const link = event.target.closest?.("a[data-conversation]");
    if (!link || event.ctrlKey || event.metaKey || event.shiftKey) return;
    event.preventDefault();
    show(false);
    openConversation(link);
  });

  // The box's own swaps (htmx names the box, the element that asked, or the list): a page
  // swapped in after a result was opened leaves the list closed.
  document.addEventListener("htmx:after:swap", (event) => {
    if (!popup() || !input() || ![input(), popup()].includes(event.target)) return;
    const drawn = popup().children.length > 0;
    // The answer to what the box says now: show it while the box still has the focus.
    show(
      !dismissed && drawn && document.activeElement === input() && input().value.trim() !== "",
    );
  });
  document.addEventListener("input", (event) => {
    if (event.target !== input()) return;
    dismissed = false;
    if (input().value.trim() === "") {
      popup().innerHTML = "";
      show(false);
    }
  });
  // Clicking anywhere else closes the list (a click in it opens a result first).
  document.addEventListener("mousedown", (event) => {
    if (!event.target.closest?.("[data-search-box]")) show(false);
  });
})();
