// Fires requests at the example's policies and shows what came back.
"use strict";

(function () {
  const log = document.querySelector("#log tbody");
  const summary = document.getElementById("summary");
  let sent = 0;

  function cell(row, text, className) {
    const td = row.insertCell();
    td.textContent = text;
    if (className) td.className = className;
  }

  async function fire(form, count) {
    const tally = { allowed: 0, denied: 0, other: 0 };
    for (let i = 0; i < count; i++) {
      let response;
      try {
        response = await fetch(form.dataset.url, {
          method: form.dataset.method,
          headers: { Accept: "application/json" },
          credentials: "same-origin",
        });
      } catch (error) {
        summary.textContent = `Request failed: ${error}`;
        return;
      }
      const row = log.insertRow(0);
      sent += 1;
      const denied = response.status === 429;
      tally[denied ? "denied" : response.ok || response.status === 401 ? "allowed" : "other"] += 1;
      cell(row, String(sent));
      cell(row, form.dataset.policy);
      cell(row, `${response.status}${denied ? " denied" : ""}`, denied ? "denied" : "allowed");
      cell(row, response.headers.get("Retry-After") || "");
      cell(row, response.headers.get("RateLimit") || "");
      cell(row, response.headers.get("RateLimit-Policy") || "");
    }
    summary.textContent =
      `${form.dataset.policy}: ${count} sent, ${tally.allowed} allowed, ${tally.denied} denied` +
      (tally.other ? `, ${tally.other} other` : "");
  }

  document.querySelectorAll("form.target").forEach(function (form) {
    form.querySelector("button[data-count]").addEventListener("click", function () {
      fire(form, 1);
    });
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      const count = Math.max(1, Math.min(200, parseInt(form.elements.count.value, 10) || 1));
      fire(form, count);
    });
  });
  document.getElementById("clear").addEventListener("click", function () {
    log.replaceChildren();
    summary.textContent = "";
  });
})();
