/* Progressive enhancements for the catalog: every page works without this file. */
(function () {
  "use strict";
  document.documentElement.classList.add("js");

  function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) {
      return navigator.clipboard.writeText(text);
    }
    // Plain HTTP (a hub on a LAN): the clipboard API is absent, fall back to a selection copy.
    var area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.style.position = "fixed";
    area.style.opacity = "0";
    document.body.appendChild(area);
    area.select();
    var ok = document.execCommand("copy");
    document.body.removeChild(area);
    return ok ? Promise.resolve() : Promise.reject(new Error("copy refused"));
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest("button[data-copy]");
    if (!button) return;
    var source = document.getElementById(button.getAttribute("data-copy"));
    if (!source) return;
    var label = button.textContent;
    copyText(source.textContent).then(function () {
      button.textContent = "Copied";
      button.setAttribute("data-copied", source.textContent);
    }, function () {
      button.textContent = "Select and copy";
    }).then(function () {
      window.setTimeout(function () { button.textContent = label; }, 1600);
    });
  });

  // Facet and sort changes apply at once: the form still works with its button when scripts are off.
  document.addEventListener("change", function (event) {
    var select = event.target.closest("select[data-autosubmit]");
    if (select && select.form) select.form.submit();
  });
})();
