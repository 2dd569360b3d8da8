// The live counters page keeps itself fresh: it asks the JSON endpoint for
// the same page every few seconds and swaps the rows and the summary in
// place. Checked rows stay checked. Plain JavaScript, no dependencies.
"use strict";
(function () {
  const root = document.querySelector(".rl-live");
  if (!root) {
    return;
  }
  const url = root.dataset.url;
  const interval = Number(root.dataset.interval) || 3000;
  const rows = root.querySelector("[data-rl=rows]");
  const summary = root.querySelector("[data-rl=summary]");
  const fallback = root.querySelector("[data-rl=fallback]");
  const updated = root.querySelector("[data-rl=updated]");
  const pauseButton = root.querySelector("[data-rl=pause]");
  const errorBox = root.querySelector("[data-rl=error]");
  const selectAll = root.querySelector("[data-rl=select-all]");
  let paused = false;
  let timer = null;
  let request = null;
  // The charts (history_charts.js) refresh with the rows, paused with them.
  const history = window.djangoRlHistory;

  // Times are shown in the server's time zone, as the page names it (the
  // fallback notice and the override list are written by the server in it).
  const zone = root.dataset.timeZone || undefined;

  function clock(iso) {
    const options = { hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23" };
    try {
      return new Date(iso).toLocaleTimeString("en-GB", { ...options, timeZone: zone });
    } catch (error) {
      return new Date(iso).toLocaleTimeString("en-GB", options); // a zone Intl does not know
    }
  }

  function showTime(iso) {
    updated.dateTime = iso;
    updated.textContent = clock(iso);
  }

  function showError(message) {
    errorBox.textContent = message;
    errorBox.hidden = !message;
    root.dataset.state = message ? "error" : "live";
  }

  function render(data) {
    const checked = new Set(
      Array.from(rows.querySelectorAll("input[name=rows]:checked"), (box) => box.value)
    );
    rows.innerHTML = data.tbody;
    for (const box of rows.querySelectorAll("input[name=rows]")) {
      box.checked = checked.has(box.value);
    }
    summary.innerHTML = data.summary;
    showTime(data.updated);
  }

  async function refresh() {
    timer = null;
    const controller = new AbortController();
    request = controller;
    const charts = history ? history.refresh(controller.signal) : null;
    try {
      const response = await fetch(url, {
        headers: { Accept: "application/json" },
        credentials: "same-origin",
        cache: "no-store",
        signal: controller.signal,
      });
      const data = await response.json().catch(() => null);
      if (data === null) {
        throw new Error("The server did not answer with counters (signed out?). Reload the page.");
      }
      if (typeof data.fallback === "string") {
        // Sent with an error too: local decisions matter most while Redis is down.
        fallback.innerHTML = data.fallback;
      }
      if (!response.ok) {
        throw new Error(data.error || "The server answered " + response.status + ".");
      }
      render(data);
      showError("");
    } catch (error) {
      if (error.name !== "AbortError") {
        showError(error.message);
      }
    } finally {
      await charts;
      if (request === controller) {
        request = null;
      }
      schedule();
    }
  }

  function schedule() {
    if (!paused && timer === null && request === null) {
      timer = setTimeout(refresh, interval);
    }
  }

  function setPaused(value) {
    paused = value;
    root.dataset.paused = String(paused);
    pauseButton.textContent = paused ? "Resume" : "Pause";
    pauseButton.setAttribute("aria-pressed", String(paused));
    if (paused) {
      clearTimeout(timer);
      timer = null;
      if (request !== null) {
        request.abort();
        request = null;
      }
    } else {
      refresh();
    }
  }

  pauseButton.addEventListener("click", () => setPaused(!paused));
  if (selectAll) {
    selectAll.addEventListener("change", () => {
      for (const box of rows.querySelectorAll("input[name=rows]")) {
        box.checked = selectAll.checked;
      }
    });
  }
  if (updated.dateTime) {
    showTime(updated.dateTime);
  }
  root.dataset.paused = "false";
  root.dataset.state = errorBox.hidden ? "live" : "error";
  if (history) {
    history.refresh();
  }
  schedule();
})();
