// The live counters page's charts: per policy, allowed, denied and
// shadow-denied decisions per minute over the last hour, as stacked bars in
// inline SVG, with the numbers as text beside them (a table of totals, the
// most denied identities). live_counters.js calls window.djangoRlHistory
// .refresh() on each poll; no other asset, no dependency.
"use strict";
(function () {
  const section = document.querySelector("[data-rl=history]");
  if (!section) {
    return;
  }
  const SVG = "http://www.w3.org/2000/svg";
  const KINDS = [
    ["allowed", "allowed", "rl-allowed"],
    ["denied", "denied", "rl-denied"],
    ["shadow_denied", "shadow-denied", "rl-shadow"],
  ];
  const WIDTH = 600;
  const HEIGHT = 100;
  const charts = section.querySelector("[data-rl=charts]");
  const errorBox = section.querySelector("[data-rl=history-error]");

  function element(name, attributes, text) {
    const made = document.createElement(name);
    for (const [key, value] of Object.entries(attributes || {})) {
      made.setAttribute(key, value);
    }
    if (text !== undefined) {
      made.textContent = text;
    }
    return made;
  }

  function svgElement(name, attributes) {
    const made = document.createElementNS(SVG, name);
    for (const [key, value] of Object.entries(attributes)) {
      made.setAttribute(key, String(value));
    }
    return made;
  }

  function sum(values) {
    return values.reduce((total, value) => total + value, 0);
  }

  // In the server's time zone, which the page names (data-time-zone), as every time on it.
  const page = section.closest("[data-time-zone]");
  const zone = (page && page.dataset.timeZone) || undefined;

  function minuteLabel(minute) {
    const options = { hour: "2-digit", minute: "2-digit", hourCycle: "h23" };
    try {
      return new Date(minute * 60000).toLocaleTimeString("en-GB", { ...options, timeZone: zone });
    } catch (error) {
      return new Date(minute * 60000).toLocaleTimeString("en-GB", options); // a zone Intl does not know
    }
  }

  // Stacked bars, one per minute, oldest on the left; each bar has a
  // <title> with its numbers, so a pointer (or a screen reader) reads them.
  function drawBars(name, minutes, series) {
    const totals = minutes.map((_, i) => sum(KINDS.map(([kind]) => series[kind][i])));
    const peak = Math.max(1, ...totals);
    const step = WIDTH / minutes.length;
    const summary = KINDS.map(([kind, label]) => `${sum(series[kind])} ${label}`).join(", ");
    const svg = svgElement("svg", {
      viewBox: `0 0 ${WIDTH} ${HEIGHT + 14}`,
      class: "rl-bars",
      role: "img",
      "aria-label": `${name}, last hour: ${summary}; busiest minute ${peak}.`,
    });
    svg.append(svgElement("line", { x1: 0, x2: WIDTH, y1: HEIGHT, y2: HEIGHT, class: "rl-axis" }));
    minutes.forEach((minute, i) => {
      if (!totals[i]) {
        return;
      }
      const bar = svgElement("g", { "data-minute": minute });
      const title = svgElement("title", {});
      title.textContent =
        minuteLabel(minute) +
        ": " +
        KINDS.map(([kind, label]) => `${series[kind][i]} ${label}`).join(", ");
      bar.append(title);
      let top = HEIGHT;
      for (const [kind, , cls] of KINDS) {
        const value = series[kind][i];
        if (!value) {
          continue;
        }
        const height = (value / peak) * (HEIGHT - 4);
        top -= height;
        bar.append(
          svgElement("rect", {
            x: (i * step + 1).toFixed(1),
            y: top.toFixed(1),
            width: Math.max(1, step - 2).toFixed(1),
            height: height.toFixed(1),
            class: cls,
          })
        );
      }
      svg.append(bar);
    });
    const label = (x, anchor, text) => {
      const made = svgElement("text", { x, y: HEIGHT + 12, "text-anchor": anchor, class: "rl-tick" });
      made.textContent = text;
      svg.append(made);
    };
    label(0, "start", minuteLabel(minutes[0]));
    label(WIDTH, "end", minuteLabel(minutes[minutes.length - 1]));
    const peakLabel = svgElement("text", { x: 2, y: 10, class: "rl-tick" });
    peakLabel.textContent = `${peak}/min`;
    svg.append(peakLabel);
    return svg;
  }

  function totalsTable(series) {
    const table = element("table", { class: "rl-totals" });
    const head = element("tr");
    head.append(element("th", { scope: "col" }, ""));
    head.append(element("th", { scope: "col" }, "This minute"));
    head.append(element("th", { scope: "col" }, "Last hour"));
    table.append(head);
    for (const [kind, label, cls] of KINDS) {
      const values = series[kind];
      const row = element("tr", { "data-kind": kind });
      const name = element("th", { scope: "row" });
      name.append(element("span", { class: `rl-key ${cls}`, "aria-hidden": "true" }), label);
      row.append(name);
      row.append(element("td", { "data-rl": "minute" }, String(values[values.length - 1])));
      row.append(element("td", { "data-rl": "hour" }, String(sum(values))));
      table.append(row);
    }
    return table;
  }

  function topList(top) {
    const box = element("div", { class: "rl-top" });
    box.append(element("h4", {}, "Most denied, this minute and the last"));
    if (!top.length) {
      box.append(element("p", { class: "rl-empty" }, "No denials."));
      return box;
    }
    const list = element("ol");
    for (const [identity, denials] of top) {
      const item = element("li", { "data-identity": identity });
      item.append(element("code", {}, identity), " ", element("span", { class: "rl-n" }, String(denials)));
      list.append(item);
    }
    box.append(list);
    return box;
  }

  function render(data) {
    const names = Object.keys(data.policies).sort();
    if (!names.length) {
      charts.replaceChildren(element("p", { class: "rl-empty" }, "No decisions in the last hour."));
      return;
    }
    const figures = names.map((name) => {
      const series = data.policies[name];
      const figure = element("figure", { class: "rl-chart", "data-policy": name });
      figure.append(element("figcaption", {}, name));
      figure.append(drawBars(name, data.minutes, series));
      const numbers = element("div", { class: "rl-numbers" });
      numbers.append(totalsTable(series), topList(series.top));
      figure.append(numbers);
      return figure;
    });
    charts.replaceChildren(...figures);
  }

  async function refresh(signal) {
    try {
      const response = await fetch(section.dataset.url, {
        headers: { Accept: "application/json" },
        credentials: "same-origin",
        cache: "no-store",
        signal,
      });
      const data = await response.json().catch(() => null);
      if (data === null || !response.ok) {
        throw new Error((data && data.error) || "The history could not be read.");
      }
      render(data);
      errorBox.hidden = true;
      errorBox.textContent = "";
    } catch (error) {
      if (error.name !== "AbortError") {
        errorBox.textContent = error.message;
        errorBox.hidden = false;
      }
    }
  }

  window.djangoRlHistory = { refresh };
})();
