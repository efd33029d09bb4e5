// The assistant panel: open/close, resize, composer keys, page context, Stop.
(() => {
  const OPEN_KEY = "monark.assistant.open";
  const panel = () => document.getElementById("assistant");
  const toggle = () => document.getElementById("assistant-toggle");
  const csrf = () => document.querySelector('meta[name="csrf-token"]')?.content || "";
  const sources = ["chat-composer", "chat-decide", "chat-retry"];
  let streamingSource = null;

  function setOpen(open, focus = true) {
    const aside = panel();
    if (!aside) return;
    aside.hidden = !open;
    toggle()?.setAttribute("aria-expanded", String(open));
    document.body.classList.toggle("assistant-open", open);
    try { localStorage.setItem(OPEN_KEY, open ? "1" : "0"); } catch (e) { /* private mode */ }
    if (open && focus) (document.getElementById("chat-text") || aside).focus?.();
    if (!open) toggle()?.focus();
  }

  function applyWidth(aside) {
    const width = parseInt(aside.dataset.width || "", 10);
    if (width) aside.style.width = `${width}px`;
  }

  function post(url, data) {
    return fetch(url, {
      method: "POST",
      headers: {"X-CSRFToken": csrf(), "Content-Type": "application/x-www-form-urlencoded"},
      body: new URLSearchParams(data),
      credentials: "same-origin",
    });
  }

  function setupResize(aside) {
    const handle = aside.querySelector(".assistant-resize");
    if (!handle) return;
    const save = () => post(aside.dataset.widthUrl, {width: Math.round(aside.getBoundingClientRect().width)});
    handle.addEventListener("pointerdown", (down) => {
      down.preventDefault();
      handle.setPointerCapture(down.pointerId);
      const startX = down.clientX;
      const startWidth = aside.getBoundingClientRect().width;
      const move = (event) => {
        const width = Math.min(960, Math.max(320, startWidth + (startX - event.clientX)));
        aside.style.width = `${width}px`;
      };
      const up = () => {
        handle.removeEventListener("pointermove", move);
        handle.removeEventListener("pointerup", up);
        save();
      };
      handle.addEventListener("pointermove", move);
      handle.addEventListener("pointerup", up);
    });
    handle.addEventListener("keydown", (event) => {
      if (event.key !== "ArrowLeft" && event.key !== "ArrowRight") return;
      const step = event.key === "ArrowLeft" ? 24 : -24;
      const width = Math.min(960, Math.max(320, aside.getBoundingClientRect().width + step));
      aside.style.width = `${width}px`;
      save();
    });
  }

  function setStreaming(source) {
    streamingSource = source;
    const aside = panel();
    aside?.classList.toggle("streaming", Boolean(source));
    const stop = aside?.querySelector(".chat-stop");
    if (stop) stop.hidden = !source;
  }

  function scrollThread() {
    const screen = document.getElementById("chat-screen");
    if (screen) screen.scrollTop = screen.scrollHeight;
  }

  document.addEventListener("DOMContentLoaded", () => {
    const aside = panel();
    if (!aside) return;
    applyWidth(aside);
    setupResize(aside);
    let open = false;
    try { open = localStorage.getItem(OPEN_KEY) === "1"; } catch (e) { /* private mode */ }
    setOpen(open, false);
  });

  document.addEventListener("click", (event) => {
    if (event.target.closest("#assistant-toggle")) setOpen(panel()?.hidden ?? false);
    else if (event.target.closest("[data-assistant-close]")) setOpen(false);
    else if (event.target.closest(".chat-stop")) stopTurn();
  });

  document.addEventListener("keydown", (event) => {
    if ((event.ctrlKey || event.metaKey) && event.key === ".") {
      event.preventDefault();
      setOpen(panel()?.hidden ?? false);
      return;
    }
    if (event.key === "Escape" && panel() && !panel().hidden && panel().contains(document.activeElement)) {
      setOpen(false);
      return;
    }
    const text = event.target.closest?.("#chat-text");
    if (text && event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      if (!streamingSource && text.value.trim()) text.form.requestSubmit();
    }
  });

  // Runs after htmx collected the form: add the page context, then clear the composer.
  document.addEventListener("htmx:config:request", (event) => {
    const source = event.detail?.ctx?.sourceElement;
    if (!source || !sources.includes(source.id)) return;
    if (streamingSource) { event.preventDefault(); return; }
    if (source.id === "chat-composer") {
      const main = document.getElementById("main");
      const body = event.detail.ctx.request.body;
      body.set("page_route", main?.dataset.route || location.pathname);
      body.set("page_model", main?.dataset.model || "");
      body.set("page_record_id", main?.dataset.recordId || "");
      const text = document.getElementById("chat-text");
      if (text) text.value = "";
    }
    setStreaming(source);
  });

  document.addEventListener("htmx:finally:request", (event) => {
    const source = event.detail?.ctx?.sourceElement;
    if (source && source === streamingSource) setStreaming(null);
  });
  document.addEventListener("htmx:sse:close", (event) => {
    if (event.target === streamingSource) setStreaming(null);
  });
  document.addEventListener("htmx:after:swap", (event) => {
    if (panel()?.contains(event.target)) scrollThread();
  });
  document.addEventListener("htmx:sse:after:message", () => scrollThread());

  function stopTurn() {
    const source = streamingSource;
    if (!source) return;
    const id = document.getElementById("chat-conversation-id")?.value;
    const url = panel()?.dataset.stopUrl?.replace(/\/0\/stop$/, `/${id}/stop`);
    if (id && url) post(url, {});
    // If this instance is not the one streaming, closing the connection stops it too.
    setTimeout(() => { if (streamingSource === source) htmx.trigger(source, "htmx:abort"); }, 3000);
  }
})();
