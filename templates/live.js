// Keeps a session's page current while the session can still move on: asks for the
// page's own JSON every few seconds and reloads the page when the session changed.
(function () {
  var main = document.querySelector("[data-live]");
  if (!main) return;
  var seen = main.getAttribute("data-live");
  function poll() {
    fetch(location.pathname, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (s) {
        if (s && s.updated_at + ":" + s.timeline.length !== seen) {
          location.reload();
        } else {
          setTimeout(poll, 3000);
        }
      })
      .catch(function () { setTimeout(poll, 10000); });
  }
  setTimeout(poll, 3000);
})();
