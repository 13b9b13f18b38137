// healer console: the live parts. Every value from the server is set as text (textContent), never as HTML.
"use strict";
(function () {
  var body = document.body;
  var page = body.getAttribute("data-page") || "";
  var dot = document.getElementById("live");
  var FEED_MAX = 200;

  function text(tag, s, cls) {
    var el = document.createElement(tag);
    el.textContent = s == null ? "" : String(s);
    if (cls) { el.className = cls; }
    return el;
  }
  function iso(t) { try { return new Date(t * 1000).toISOString().replace(/\.\d+Z$/, "Z"); } catch (e) { return ""; } }
  function bump(col, d) {
    var c = col && col.querySelector("h2 .count");
    if (c) { c.textContent = String(Math.max(0, (parseInt(c.textContent, 10) || 0) + d)); }
  }
  function ticketLink(id) {
    var a = document.createElement("a");
    a.href = "/tickets/" + encodeURIComponent(id);
    a.textContent = id;
    return a;
  }

  function onBoard(ev) {
    if (ev.kind !== "ticket.moved" && ev.kind !== "ticket.created") { return; }
    var to = ev.kind === "ticket.moved" ? ev.to : ev.state;
    var card = document.querySelector('li.card[data-ticket="' + CSS.escape(ev.subject) + '"]');
    var dest = document.querySelector('section.col[data-state="' + CSS.escape(to || "") + '"]');
    if (card) {
      bump(card.closest("section.col"), -1);
      if (dest) { dest.querySelector("ul").prepend(card); bump(dest, 1); } else { card.remove(); }
    } else if (dest) {
      card = document.createElement("li");
      card.className = "card";
      card.setAttribute("data-ticket", ev.subject);
      card.appendChild(ticketLink(ev.subject));
      card.appendChild(document.createTextNode(" "));
      card.appendChild(text("span", ev.title || "", "title"));
      dest.querySelector("ul").prepend(card);
      bump(dest, 1);
    }
    if (card) { card.classList.add("moved"); card.setAttribute("data-state", to || ""); }
  }

  function onTicket(ev) {
    if (ev.subject !== body.getAttribute("data-ticket") || ev.kind !== "ticket.moved") { return; }
    var st = document.getElementById("tstate");
    if (st) { st.textContent = ev.to; }
    var tb = document.querySelector("table.transitions tbody");
    if (tb) {
      var tr = document.createElement("tr");
      [ev.id, iso(ev.at), ev.from, ev.to, ev.actor, ev.reason].forEach(function (v) { tr.appendChild(text("td", v)); });
      tb.appendChild(tr);
    }
  }

  function feed(ev) {
    var ol = document.getElementById("feed");
    if (!ol) { return; }
    var li = document.createElement("li");
    li.appendChild(text("span", iso(ev.at), "at"));
    li.appendChild(text("span", ev.kind, "kind"));
    li.appendChild(text("span", ev.subject, "subject"));
    var rest = [ev.from && ev.to ? ev.from + " → " + ev.to : "", ev.action || "", ev.actor || "", ev.reason || ""]
      .filter(Boolean).join(" · ");
    li.appendChild(text("span", rest, "detail"));
    ol.prepend(li);
    while (ol.children.length > FEED_MAX) { ol.lastElementChild.remove(); }
  }

  if (window.EventSource) {
    var es = new EventSource("/api/events");
    es.addEventListener("hello", function () { if (dot) { dot.className = "live on"; } });
    es.addEventListener("fleet", function (m) {
      var ev;
      try { ev = JSON.parse(m.data); } catch (e) { return; }
      feed(ev);
      if (page === "board") { onBoard(ev); }
      if (page === "ticket") { onTicket(ev); }
    });
    es.onerror = function () { if (dot) { dot.className = "live off"; } };
  }

  if (page === "agent") {
    var out = document.getElementById("output");
    var flag = document.getElementById("stream");
    var src = new EventSource("/api/agents/" + encodeURIComponent(body.getAttribute("data-agent")) + "/output");
    src.addEventListener("output", function (m) {
      if (flag) { flag.className = "live on"; }
      out.appendChild(document.createTextNode(m.data));
      if (out.textContent.length > 400000) { out.textContent = out.textContent.slice(-200000); }
      out.scrollTop = out.scrollHeight;
    });
    src.addEventListener("end", function () { if (flag) { flag.className = "live ended"; flag.textContent = "ended"; } src.close(); });
  }
})();
