// The assistant panel: open/close, resize, composer keys, page context, Stop.
(() => {
  const OPEN_KEY = "monark.assistant.open";
  const panel = () => document.getElementById("assistant");
  const toggle = () => document.getElementById("assistant-toggle");
  const csrf = () => document.querySelector('meta[name="csrf-token"]')?.content || "";
  // What streams a turn: the three forms that start one, and the follower of a running turn.
  const starters = [
    "chat-composer", "chat-decide", "chat-allow", "chat-retry", "chat-regenerate", "chat-edit",
  ];
  const sources = [...starters, "chat-follow"];
  // The open conversation is remembered per user and org: ids of one org mean nothing in another.
  const conversationKey = () => {
    const aside = panel();
    return `monark.assistant.conversation.${aside?.dataset.user || ""}.${aside?.dataset.org || ""}`;
  };
  try { localStorage.removeItem("monark.assistant.conversation"); } catch (e) { /* the old, shared key */ }
  let streamingSource = null;
  let lastText = ""; // the composer's text, restored if the send is refused

  function focusPanel(aside) {
    const target = document.getElementById("chat-text")
      || aside.querySelector("#chat-screen button, #chat-screen a, .assistant-head button");
    target?.focus();
  }

  function setOpen(open, focus = true) {
    const aside = panel();
    if (!aside) return;
    aside.hidden = !open;
    toggle()?.setAttribute("aria-expanded", String(open));
    document.body.classList.toggle("assistant-open", open);
    try { localStorage.setItem(OPEN_KEY, open ? "1" : "0"); } catch (e) { /* private mode */ }
    if (!focus) return;
    if (open && !document.getElementById("chat-text")) focusOnArrival = true;
    if (open) focusPanel(aside);
    else toggle()?.focus();
  }

  // The panel never takes more than what leaves the page a usable width.
  // The limits are the server's (monark/assistant/panel.py), on the panel as data attributes.
  const limit = (name) => Number(panel()?.dataset[name]);
  const maxWidth = () =>
    Math.max(limit("minWidth"), Math.min(limit("maxWidth"), window.innerWidth - limit("pageMin")));
  const clampWidth = (width) => Math.min(maxWidth(), Math.max(limit("minWidth"), width));

  function applyWidth(aside) {
    const width = parseInt(aside.dataset.width || "", 10);
    if (width) aside.style.width = `${clampWidth(width)}px`;
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
        aside.style.width = `${clampWidth(startWidth + (startX - event.clientX))}px`;
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
      aside.style.width = `${clampWidth(aside.getBoundingClientRect().width + step)}px`;
      save();
    });
  }

  // While a reply streams, Send is disabled like Enter is; the composer keeps its text.
  function syncStreaming() {
    const aside = panel();
    aside?.classList.toggle("streaming", Boolean(streamingSource));
    const stop = aside?.querySelector(".chat-stop");
    if (stop) stop.hidden = !streamingSource;
    const send = aside?.querySelector(".chat-send");
    // A composer the server disabled (no model connected) stays disabled.
    const offline = aside?.querySelector("#chat-text")?.disabled;
    if (send) send.disabled = Boolean(streamingSource) || Boolean(offline);
  }

  function setStreaming(source) {
    streamingSource = source;
    syncStreaming();
    if (!source && deferred) setTimeout(replayDeferred, 0);
  }

  // A decision made while the stream that drew its card is still closing (Confirm pressed
  // the moment the card appears) is not dropped: it is sent once the stream has ended, with
  // the same button, should the card still offer it.
  let deferred = null;
  let lastSubmitter = null;
  document.addEventListener("submit", (event) => {
    lastSubmitter = event.submitter || null;
  }, true);
  function replayDeferred() {
    const wanted = deferred;
    deferred = null;
    if (!wanted || streamingSource) return;
    const form = document.getElementById(wanted.formId);
    if (!form) return;
    const button = wanted.name === null ? null : [...document.querySelectorAll("button[name]")]
      .find((b) => b.form === form && b.name === wanted.name && b.value === wanted.value);
    if (wanted.name !== null && (!button || button.disabled)) return;
    form.requestSubmit(button || undefined);
  }

  function scrollThread() {
    const screen = document.getElementById("chat-screen");
    if (screen) screen.scrollTop = screen.scrollHeight;
  }

  // Sets up a panel the server rendered: on page load, and again should a swap ever replace it
  // (a history restore swaps only #main, but a fallback may swap the whole body).
  function initPanel() {
    const aside = panel();
    if (!aside || aside.dataset.ready) return;
    aside.dataset.ready = "1";
    applyWidth(aside);
    setupResize(aside);
    loadFirstScreen();
    let open = false;
    try { open = localStorage.getItem(OPEN_KEY) === "1"; } catch (e) { /* private mode */ }
    setOpen(open, false);
  }
  document.addEventListener("DOMContentLoaded", initPanel);
  document.addEventListener("htmx:after:settle", initPanel);
  window.addEventListener("resize", () => { if (panel()) applyWidth(panel()); });

  // "New conversation" on a new conversation not yet begun: nothing to fetch, the text
  // typed so far stays, and the next thing to do is to type.
  document.addEventListener("click", (event) => {
    if (!event.target.closest?.("[data-assistant-new]")) return;
    const screen = document.getElementById("chat-screen");
    const blank = screen && blankThread() && !screenPending;
    if (!blank) return;
    event.preventDefault();
    event.stopImmediatePropagation();
    document.getElementById("chat-text")?.focus();
  }, true);

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

  // However the composer is submitted (Send, a script), nothing is sent while a reply streams:
  // stopped here, before htmx sees it, so it is neither queued nor is the composer cleared.
  document.addEventListener("submit", (event) => {
    if (event.target.id === "chat-composer" && streamingSource) {
      event.preventDefault();
      event.stopImmediatePropagation();
    }
  }, true);

  // Runs after htmx collected the form: add the page context, then clear the composer.
  document.addEventListener("htmx:config:request", (event) => {
    const source = event.detail?.ctx?.sourceElement;
    if (!source || !sources.includes(source.id)) return;
    if (streamingSource) {
      event.preventDefault();
      if (source.id !== "chat-composer" && source.id !== "chat-follow" && source.tagName === "FORM") {
        const by = lastSubmitter && lastSubmitter.form === source ? lastSubmitter : null;
        deferred = {formId: source.id, name: by ? by.name : null, value: by ? by.value : null};
      }
      return;
    }
    if (source.id === "chat-composer") {
      const main = document.getElementById("main");
      const body = event.detail.ctx.request.body;
      body.set("page_route", main?.dataset.route || location.pathname);
      body.set("page_model", main?.dataset.model || "");
      body.set("page_record_id", main?.dataset.recordId || "");
      body.set("page_query", location.search);
      const text = document.getElementById("chat-text");
      if (text) { lastText = text.value; text.value = ""; }
    }
    setStreaming(source);
  });

  // A refused send (an error notice instead of a stream) gives the text back.
  document.addEventListener("htmx:after:request", (event) => {
    const ctx = event.detail?.ctx;
    if (ctx?.sourceElement?.id !== "chat-composer") return;
    const status = ctx.response?.status ?? 0;
    const text = document.getElementById("chat-text");
    if (status >= 400 && text && !text.value) text.value = lastText;
  });

  // After a confirmed change the page behind the panel may be stale: reload the main area.
  function refreshMain() {
    if (!document.getElementById("main")) return;
    htmx.ajax("GET", location.pathname + location.search, {
      target: "#main", select: "#main", swap: "outerHTML",
    });
  }
  document.addEventListener("changed", (event) => {
    if (sources.includes(event.target?.id)) refreshMain();
  });
  // An undo that went through changed the page behind too.
  document.addEventListener("htmx:after:request", (event) => {
    const ctx = event.detail?.ctx;
    if (ctx?.sourceElement?.id !== "chat-undo") return;
    const status = ctx.response?.status ?? 0;
    if (status >= 200 && status < 300) refreshMain();
  });

  // Only the screen asked for last may draw #chat-screen: a first screen still loading when
  // the user clicks "New conversation" (or opens a conversation) must not land on top of it.
  // The older request is aborted (its button may be gone from the page, so its events would no
  // longer reach the document) and, should its answer be in already, its swap refused.
  let screenAsks = 0;
  let screenAsked = null;
  let screenPending = null; // a screen asked for and not in yet
  document.addEventListener("htmx:before:request", (event) => {
    const ctx = event.detail?.ctx;
    if (ctx?.target?.id !== "chat-screen") return;
    if (screenAsked && screenAsked !== ctx) screenAsked.request?.abort?.();
    screenAsked = ctx;
    screenPending = ctx;
    ctx.screenAsk = ++screenAsks;
  });
  document.addEventListener("htmx:finally:request", (event) => {
    if (event.detail?.ctx && event.detail.ctx === screenPending) screenPending = null;
  });
  document.addEventListener("htmx:before:swap", (event) => {
    const ctx = event.detail?.ctx;
    if (ctx?.screenAsk && ctx.screenAsk !== screenAsks) event.preventDefault();
  });

  // Where the user is, for a new conversation's suggestions (the server reads it as a hint).
  function pageParams() {
    const main = document.getElementById("main");
    return new URLSearchParams({
      page_route: main?.dataset.route || location.pathname, page_query: location.search,
    });
  }
  function blankThread() {
    const thread = document.getElementById("chat-thread");
    return Boolean(thread && !thread.querySelector(":scope > :not(.chat-empty)")
      && !document.getElementById("chat-conversation-id")?.value);
  }
  document.addEventListener("htmx:config:request", (event) => {
    const ctx = event.detail?.ctx;
    if (!ctx?.sourceElement?.matches?.("[data-assistant-new]")) return;
    const action = ctx.request.action;
    suggestedFor = pageParams().toString();
    ctx.request.action = `${action}${action.includes("?") ? "&" : "?"}${suggestedFor}`;
  });
  // A suggestion is sent as if typed.
  document.addEventListener("click", (event) => {
    const chosen = event.target.closest?.("[data-suggestion]");
    const text = document.getElementById("chat-text");
    if (!chosen || !text || text.disabled || streamingSource) return;
    text.value = chosen.dataset.suggestion;
    text.form.requestSubmit();
  });
  // Moving to another page with a new conversation open: its suggestions follow the page.
  let suggestedFor = pageParams().toString();
  document.addEventListener("htmx:after:settle", (event) => {
    if (panel()?.contains(event.target)) return;
    const url = document.getElementById("chat-screen")?.dataset.suggestionsUrl;
    const page = pageParams().toString();
    if (page === suggestedFor || !url || !blankThread()) return;
    if (!document.getElementById("chat-suggestions")) return;
    suggestedFor = page;
    htmx.ajax("GET", `${url}?${page}`, {target: "#chat-suggestions", swap: "outerHTML"})
      .catch(() => { /* the old suggestions stay */ });
  });

  // The first screen, ready to type: the conversation the user had open before a full page
  // load, else their most recent one, else a new one (the server picks: monark/assistant/views).
  // Opened before it arrives, the panel focuses the composer once it is in.
  let focusOnArrival = false;
  function loadFirstScreen() {
    const screen = document.getElementById("chat-screen");
    const url = screen?.dataset.firstUrl;
    if (!url) return;
    let id = null;
    try { id = localStorage.getItem(conversationKey()); } catch (e) { /* private mode */ }
    const page = pageParams();
    suggestedFor = page.toString();
    if (id && /^\d+$/.test(id)) page.set("remembered", id);
    const target = `${url}?${page}`;
    htmx.ajax("GET", target, {target: "#chat-screen", swap: "innerHTML"}).then(() => {
      const aside = panel();
      if (!focusOnArrival || !aside || aside.hidden) return;
      focusOnArrival = false;
      // Unless the user went on to something else in the panel meanwhile.
      if (document.activeElement === document.body || !aside.contains(document.activeElement)
          || document.activeElement.closest(".assistant-head")) focusPanel(aside);
    }).catch(() => { /* a later screen was asked for instead */ });
  }
  document.addEventListener("htmx:after:swap", () => {
    const id = document.getElementById("chat-conversation-id")?.value;
    const inThread = Boolean(document.getElementById("chat-thread"));
    try {
      if (inThread && id) localStorage.setItem(conversationKey(), id);
      else if (!inThread && document.querySelector(".chat-list")) localStorage.removeItem(conversationKey());
    } catch (e) { /* private mode */ }
  });

  document.addEventListener("htmx:finally:request", (event) => {
    const source = event.detail?.ctx?.sourceElement;
    if (source && source === streamingSource) setStreaming(null);
  });
  document.addEventListener("htmx:sse:close", (event) => {
    if (event.target === streamingSource) setStreaming(null);
  });
  // A swap that removed the focused element leaves focus on <body>. When the same control is
  // drawn again (a card redrawn as its turn settles, still asking), focus goes back to it;
  // when it is gone (the Confirm of a card now decided), to the message box, so keyboard
  // users stay put. Only when the focus was last in the panel: a click elsewhere keeps it.
  let focusInPanel = false;
  let lastFocus = null;
  document.addEventListener("focusin", (event) => {
    focusInPanel = Boolean(panel()?.contains(event.target));
    if (focusInPanel) lastFocus = describeControl(event.target);
  });
  document.addEventListener("pointerdown", (event) => {
    if (!panel()?.contains(event.target)) focusInPanel = false;
  });
  function describeControl(el) {
    return {
      id: el.id || null, holder: el.closest("[id]")?.id || null, tag: el.tagName,
      name: el.getAttribute("name"), value: el.getAttribute("value"), text: el.textContent.trim(),
    };
  }
  function findControl(d) {
    if (!d) return null;
    if (d.id) return document.getElementById(d.id);
    const holder = d.holder && document.getElementById(d.holder);
    if (!holder) return null;
    return [...holder.querySelectorAll(d.tag)].find((el) =>
      el.getAttribute("name") === d.name && el.getAttribute("value") === d.value
      && el.textContent.trim() === d.text) || null;
  }
  function keepFocusInPanel() {
    const aside = panel();
    if (!aside || aside.hidden || !focusInPanel || document.activeElement !== document.body) return;
    const again = findControl(lastFocus);
    if (again && aside.contains(again) && !again.disabled) { again.focus(); return; }
    const text = document.getElementById("chat-text");
    if (text && !text.disabled) text.focus();
    else focusPanel(aside);
  }
  document.addEventListener("htmx:sse:close", keepFocusInPanel);
  document.addEventListener("htmx:after:swap", (event) => {
    if (!panel()?.contains(event.target)) return;
    keepFocusInPanel();
    scrollThread();
    syncStreaming(); // a screen swapped in mid-stream gets a disabled Send too
    // After "New conversation", the next thing to do is to type.
    if (event.detail?.ctx?.sourceElement?.matches?.("[data-assistant-new]")) {
      document.getElementById("chat-text")?.focus();
    }
  });
  document.addEventListener("htmx:sse:after:message", () => { keepFocusInPanel(); scrollThread(); });

  // Edit on the last message: its text in a box in place of the bubble, sent with Save and
  // send (the thread's #chat-edit form); Cancel puts the bubble back as it was.
  function setEditing(message, editing) {
    const box = message?.querySelector(".msg-edit");
    if (!box) return;
    box.hidden = !editing;
    message.querySelector(".bubble").hidden = editing;
    message.querySelector(".msg-edit-open").hidden = editing;
    const text = box.querySelector("textarea");
    text.disabled = !editing;
    if (editing) { text.focus(); text.setSelectionRange(text.value.length, text.value.length); }
    else { text.value = text.defaultValue; message.querySelector(".msg-edit-open").focus(); }
  }
  document.addEventListener("click", (event) => {
    const open = event.target.closest(".msg-edit-open");
    const cancel = event.target.closest(".msg-edit-cancel");
    if (open) setEditing(open.closest(".msg"), true);
    else if (cancel) setEditing(cancel.closest(".msg"), false);
  });

  // Stop reaches the turn on whichever instance runs it; the stream then ends with "done".
  // The server says what happened: stopped, still stopping, or nothing was running (then the
  // thread is redrawn as it is).
  function stopTurn() {
    const follow = document.getElementById("chat-follow");
    const url = follow?.dataset.stopUrl;
    if (!url || !streamingSource) return;
    const stop = panel()?.querySelector(".chat-stop");
    if (stop) stop.disabled = true;
    const said = (text) => {
      const live = document.getElementById("chat-live");
      if (live) live.textContent = text;
    };
    post(url, {turn: follow.dataset.turn || ""})
      .then((response) => response.json().then((body) => {
        if (response.status === 409) reloadThread();
        else if (response.status === 202) said(body.message || "");
      }))
      .catch(() => said("Stop did not reach the server. Check the connection and try again."))
      .finally(() => { if (stop) stop.disabled = false; });
  }

  function reloadThread() {
    const screen = document.getElementById("chat-screen");
    const id = document.getElementById("chat-conversation-id")?.value;
    if (screen?.dataset.listUrl && id) {
      htmx.ajax("GET", `${screen.dataset.listUrl}/${id}`, {target: "#chat-screen", swap: "innerHTML"});
    }
  }

  // A turn goes on without its watcher: when the stream that started it breaks off before
  // "done" (a proxy, a network change), the follower wakes and catches up with the turn.
  document.addEventListener("htmx:sse:close", (event) => {
    if (!starters.includes(event.target?.id) || event.detail?.reason !== "ended") return;
    const follow = document.getElementById("chat-follow");
    if (follow) htmx.trigger(follow, "chat:resume");
  });

  // Refused because a turn already runs here (started in another tab), or the card was
  // decided there: the answer brought a follower of that turn; wake it once this request is
  // over, so the thread is drawn as it is and follows the turn live.
  document.addEventListener("htmx:finally:request", (event) => {
    const ctx = event.detail?.ctx;
    if (!starters.includes(ctx?.sourceElement?.id) || ctx?.response?.status !== 409) return;
    const follow = document.getElementById("chat-follow");
    if (follow && !streamingSource) htmx.trigger(follow, "chat:resume");
  });

  // A follower answered with anything but a stream (signed out: 204 with a redirect; the
  // conversation gone: 404) must not retry forever: drop it and redraw the thread, which
  // signs a signed-out user in again or shows the list.
  function dropFollower(event) {
    const follow = event.target;
    if (follow?.id !== "chat-follow") return;
    const status = event.detail?.connection?.status ?? event.detail?.status;
    if (status === undefined || status === 200) return;
    follow.remove();
    setStreaming(null);
    reloadThread();
  }
  document.addEventListener("htmx:sse:after:connection", dropFollower);
  document.addEventListener("htmx:sse:error", dropFollower);
})();
