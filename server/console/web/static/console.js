// jobkit console: local times, small form helpers, and live updates from
// the console's event stream (Server-Sent Events fed by JobService.Watch).
// No inline script anywhere: the Content-Security-Policy forbids it.
(function () {
  "use strict";
  var rel = window.Intl && Intl.RelativeTimeFormat ? new Intl.RelativeTimeFormat(undefined, { numeric: "auto" }) : null;

  function relative(d) {
    var s = (d.getTime() - Date.now()) / 1000, a = Math.abs(s);
    if (!rel) return "";
    if (a < 60) return rel.format(Math.round(s), "second");
    if (a < 3600) return rel.format(Math.round(s / 60), "minute");
    if (a < 86400) return rel.format(Math.round(s / 3600), "hour");
    return rel.format(Math.round(s / 86400), "day");
  }

  // enhance prepares the elements under root: local times, the time zone
  // of filter forms, auto-submitting selects, confirmations, JSON checks.
  function enhance(root) {
    root.querySelectorAll("time[datetime]").forEach(function (t) {
      var v = t.getAttribute("datetime");
      if (!v) return;
      var d = new Date(v);
      if (isNaN(d)) return;
      t.title = t.textContent.trim();
      t.textContent = d.toLocaleString() + " (" + relative(d) + ")";
    });
    var zone = window.Intl ? Intl.DateTimeFormat().resolvedOptions().timeZone : "";
    root.querySelectorAll("input[data-tz]").forEach(function (i) { if (!i.value) i.value = zone; });
    root.querySelectorAll("select[data-autosubmit]").forEach(function (s) {
      s.addEventListener("change", function () { s.form.submit(); });
    });
    root.querySelectorAll("form[data-confirm]").forEach(function (f) {
      f.addEventListener("submit", function (e) { if (!window.confirm(f.dataset.confirm)) e.preventDefault(); });
    });
    root.querySelectorAll("form[data-json]").forEach(function (f) {
      var field = f.elements[f.dataset.json], out = f.querySelector("[data-json-error]");
      function check() {
        var v = field.value.trim(), msg = "";
        if (v) {
          try {
            if (!Array.isArray(JSON.parse(v))) msg = "The arguments must be a JSON array, like [1, \"two\"].";
          } catch (err) { msg = "Not valid JSON: " + err.message; }
        }
        field.setCustomValidity(msg);
        if (out) { out.textContent = msg; out.hidden = !msg; }
        return !msg;
      }
      field.addEventListener("input", check);
      f.addEventListener("submit", function (e) { if (!check()) { e.preventDefault(); field.focus(); } });
    });
  }

  // preview shows a trigger form's next fire times as its spec is typed.
  function preview(root) {
    root.querySelectorAll("[data-preview]").forEach(function (out) {
      var f = out.closest("form"), timer = null, seq = 0;
      function update() {
        var q = new URLSearchParams({ cron: f.elements.cron.value, tz: f.elements.tz.value, interval: f.elements.interval.value }), n = ++seq;
        fetch(out.dataset.preview + "?" + q, { credentials: "same-origin", cache: "no-store" })
          .then(function (r) { return r.ok ? r.text() : null; })
          .then(function (html) { if (html !== null && n === seq) { out.innerHTML = html; enhance(out); } })
          .catch(function () {});
      }
      ["cron", "tz", "interval"].forEach(function (name) {
        f.elements[name].addEventListener("input", function () { clearTimeout(timer); timer = setTimeout(update, 150); });
      });
      if (f.elements.cron.value || f.elements.interval.value) update();
    });
  }

  // keep returns what the user typed in the forms (with an id) of root, so
  // that a live refresh does not throw it away.
  function keep(root) {
    var out = [];
    root.querySelectorAll("form[id] input[name], form[id] textarea[name]").forEach(function (el) {
      if (el.type === "checkbox") {
        if (el.checked !== el.defaultChecked) out.push([el.form.id, el.name, el.value, el.checked]);
        return;
      }
      if (el.type === "hidden" || el.type === "submit" || el.value === el.defaultValue) return;
      out.push([el.form.id, el.name, el.value]);
    });
    return out;
  }

  // restore puts kept values back into the refreshed forms.
  function restore(root, kept) {
    kept.forEach(function (k) {
      var f = root.querySelector("form#" + CSS.escape(k[0]));
      if (!f) return;
      if (k.length === 4) {
        var box = f.querySelector("input[type=checkbox][name=\"" + CSS.escape(k[1]) + "\"][value=\"" + CSS.escape(k[2]) + "\"]");
        if (box) box.checked = k[3];
      } else if (f.elements[k[1]]) {
        f.elements[k[1]].value = k[2];
      }
    });
  }

  // Live updates: on each change, fetch this page's content again (at most
  // every 250 ms) and put it in place, unless the user is typing in it.
  function live(main, rendered) {
    var url = main.dataset.live, m = location.pathname.match(/\/instances\/([0-9a-fA-F-]{8,})$/);
    if (m) url += "?instance=" + encodeURIComponent(m[1]);
    // shown is the page content as the server last rendered it (before
    // enhance), normalised by the browser's serialiser: a refresh that
    // brings the same content leaves the page alone.
    var pending = false, busy = false, last = 0, refreshes = 0, shown = rendered;
    // partShown is each live part's content as the server last rendered it.
    var partShown = {}, t0 = document.createElement("template");
    t0.innerHTML = rendered;
    t0.content.querySelectorAll("[data-live-part][id]").forEach(function (p) { partShown[p.id] = p.innerHTML; });
    function typing() {
      var a = document.activeElement;
      return a && main.contains(a) && /^(INPUT|TEXTAREA|SELECT)$/.test(a.tagName) && a.type !== "checkbox" && a.type !== "submit";
    }
    function refresh() {
      if (busy) { pending = true; return; }
      if (typing()) { pending = true; setTimeout(refresh, 500); return; }
      var wait = 250 - (Date.now() - last);
      if (wait > 0) { pending = true; setTimeout(refresh, wait); return; }
      pending = false; busy = true; last = Date.now();
      fetch(location.href, { headers: { "X-Jobkit-Fragment": "1" }, credentials: "same-origin", cache: "no-store" })
        .then(function (r) {
          if (r.status === 401) { location.reload(); return null; }
          return r.ok ? r.text() : null;
        })
        .then(function (html) {
          if (html === null || html === undefined) return;
          var t = document.createElement("template");
          t.innerHTML = html;
          if (t.innerHTML === shown) return;
          if (typing()) { pending = true; return; }
          shown = t.innerHTML;
          // A page that marks its live parts (the instances list) has only
          // those replaced: its forms stay the very elements the user is
          // about to click or type in. Other pages are replaced whole, with
          // typed values kept.
          var parts = main.querySelectorAll("[data-live-part][id]");
          if (parts.length) {
            parts.forEach(function (p) {
              var n = t.content.getElementById(p.id);
              if (!n || partShown[p.id] === n.innerHTML) return; // unchanged: left alone
              partShown[p.id] = n.innerHTML;
              p.replaceWith(n);
              enhance(n);
            });
          } else {
            var kept = keep(main);
            main.innerHTML = html;
            restore(main, kept);
            enhance(main);
            preview(main);
          }
          document.body.dataset.refreshes = String(++refreshes);
        })
        .catch(function () {})
        .then(function () { busy = false; if (pending) setTimeout(refresh, typing() ? 500 : 0); });
    }
    var es = new EventSource(url);
    // On (re)opening, refresh once: a change between the page's render and
    // the feed's start (or during a reconnection) has no event of its own.
    es.addEventListener("open", function () {
      document.body.dataset.live = "open";
      refresh();
    });
    es.addEventListener("error", function () { document.body.dataset.live = "reconnecting"; });
    es.addEventListener("change", function () { refresh(); });
    // Progress reports are not events (they would flood the feed): while
    // the page shows the progress bar of a running instance, its content
    // is fetched again every second, and only then.
    setInterval(function () {
      if (main.querySelector("progress[data-running]")) refresh();
    }, 1000);
  }

  document.addEventListener("DOMContentLoaded", function () {
    var main = document.getElementById("live"), rendered = main ? main.innerHTML : "";
    enhance(document);
    preview(document);
    if (main && main.dataset.live && window.EventSource) live(main, rendered);
  });
})();
