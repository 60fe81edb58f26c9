/* The Checkpoints panel: Horizon's ajax updates replace a row of the
 * chains table when its checkpoint settles. A settled checkpoint may
 * move in the tree (its parent version is known only then), which
 * changes how its neighbours are drawn, and the picture shows it too:
 * so after a change, the table's rows and the picture are taken again
 * from the same page, at most once a second. */
(function () {
  'use strict';

  function start() {
    var holder = document.querySelector('div.blobcr-picture');
    var table = document.querySelector('table#chains');
    if (!holder || !table || !table.tBodies.length) {
      return;
    }
    var timer = null;
    var observer = new MutationObserver(function () {
      if (timer === null) {
        timer = window.setTimeout(redraw, 1000);
      }
    });

    function watch() {
      observer.observe(table.tBodies[0], {childList: true});
    }

    function redraw() {
      timer = null;
      fetch(window.location.href, {credentials: 'same-origin'})
        .then(function (response) {
          return response.ok ? response.text() : null;
        })
        .then(function (text) {
          if (!text) {
            return;
          }
          var page = new DOMParser().parseFromString(text, 'text/html');
          var svg = page.querySelector('div.blobcr-picture svg');
          var rows = page.querySelector('table#chains tbody');
          var drawn = holder.querySelector('svg');
          if (svg && drawn) {
            drawn.replaceWith(document.importNode(svg, true));
          }
          if (rows) {
            observer.disconnect();
            table.tBodies[0].replaceWith(document.importNode(rows, true));
            watch();
            if (window.jQuery) {
              window.jQuery(table).trigger('update');   // tablesorter's cache
            }
          }
          holder.setAttribute('data-redrawn',
            String(Number(holder.getAttribute('data-redrawn') || 0) + 1));
        });
    }
    watch();
  }

  if (document.readyState === 'loading') {
    document.addEventListener('DOMContentLoaded', start);
  } else {
    start();
  }
}());
