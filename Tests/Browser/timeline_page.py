#!/usr/bin/env python3
"""Drives a live recorder's timeline page in headless Chromium (Debian's chromium, chromium-driver and
python3-selenium) and prints what it saw as one JSON object; the Swift test checks it against the store.

usage: timeline_page.py BASE_URL TOKEN OUTPUT_DIR
       timeline_page.py BASE_URL TOKEN OUTPUT_DIR restart PID COMMAND_JSON
       timeline_page.py BASE_URL TOKEN OUTPUT_DIR saves PID

It loads the page with ?token= once, reads the lanes, hovers over the "front" lane and saves the thumbnail's
pixels, opens the frame view and steps with the arrow keys (one at a time, then ten at once), drags a range on the
"front" lane and exports it as .mkv (downloaded by id), adds a marker whose label is markup and reloads to see it
shown as text, and saves a screenshot. It checks that a timeline load error goes once a load succeeds, that a
200-letter label without spaces stays inside the lanes and the markers panel, and that an export of several files
(.y4m of every stream) has a link per file. Then it points before recorder time 0 (hover, click, drag), zooms out past
the widest view and reads the axis's wall-clock labels, and clicks a lane once the token cookie is gone.

With `restart`, it stops the recorder PID (SIGTERM) while the page is open, reads what the page says while the
recorder is gone, starts the recorder again with COMMAND_JSON (a JSON array: the same store and port, and a new
stream "side" whose input fails) and reads what the page says once it answers again; then kills it (SIGKILL) and reads what the page says.

With `saves`, on a recorder of front and rear whose store also holds "old" from an earlier run, it exports a range
after every frame from both streams (each refused), reads the bands a save of every stream draws while it waits and
once its tracks are known, makes 25 more saves and counts the exports panel's entries, and last stops the recorder
PID (SIGTERM) while a save of every stream waits, reading what the page shows of it once the recorder finished it.
"""
import base64
import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

BASE, TOKEN, OUT = sys.argv[1], sys.argv[2], sys.argv[3]
SCENARIO = sys.argv[4] if len(sys.argv) > 4 else "page"
XSS_LABEL = '<img src=x onerror="window.__xss=1">bold <b>not</b>'


def api(method, path, body=None):
    request = urllib.request.Request(BASE + path, method=method, headers={"Authorization": "Bearer " + TOKEN})
    if body is not None:
        request.data = json.dumps(body).encode()
        request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.read()


def lane_offset(driver, lane, t):
    """The offset from the lane's centre (Selenium's origin) of recorder time t (ns)."""
    return int(driver.execute_script("return xAt(arguments[0]);", t) - lane.size["width"] / 2)


def text_of(driver, element_id):
    return driver.execute_script(
        "const element = document.getElementById(arguments[0]); return element ? element.textContent : null;",
        element_id)


def part(driver, result, name, run):
    """Runs one independent part of the page's checks: a failure is reported under its name and the page is
    brought back to rest (no dialog open), so the parts after it still run."""
    try:
        run()
    except Exception as error:  # noqa: BLE001 - reported to the Swift test, which fails with it
        result.setdefault("failed_parts", {})[name] = "%s: %s" % (type(error).__name__, error)
        driver.execute_script("for (const d of document.querySelectorAll('dialog[open]')) d.close();")


def page_scenario(driver, wait, result):
    driver.get(BASE + "/?token=" + TOKEN)
    result["url"] = driver.current_url
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#lanes [data-stream]")) >= 2)
    result["lanes"] = [e.get_attribute("data-stream")
                       for e in driver.find_elements(By.CSS_SELECTOR, "#lanes [data-stream]")]
    time.sleep(1.5)  # a timeline load and a live-edge step

    # Stop following the live edge, so the lane stays where it is while the test points at it.
    driver.execute_script("state.follow = false;")
    lane = driver.find_element(By.CSS_SELECTOR, '#lanes [data-stream="front"] canvas')
    width = lane.size["width"]

    def offset(fraction):
        """The offset from the lane's centre (Selenium's origin) of a fraction of what is recorded."""
        x = driver.execute_script("return xAt(state.liveEdge * arguments[0]);", fraction)
        return int(x - width / 2)

    # Hover over the front lane at 60 % of what is recorded: a thumbnail of the frame there.
    hover = offset(0.6)
    ActionChains(driver).move_to_element_with_offset(lane, hover, 0).perform()
    wait.until(lambda d: d.find_element(By.ID, "thumbnail-image").get_attribute("data-time"))
    image = driver.find_element(By.ID, "thumbnail-image")
    wait.until(lambda d: d.execute_script("return arguments[0].complete && arguments[0].naturalWidth > 0", image))
    pixels = driver.execute_script("""
        const image = arguments[0];
        const canvas = document.createElement('canvas');
        canvas.width = image.naturalWidth; canvas.height = image.naturalHeight;
        const context = canvas.getContext('2d');
        context.drawImage(image, 0, 0);
        const data = context.getImageData(0, 0, canvas.width, canvas.height).data;
        let binary = '';
        for (let i = 0; i < data.length; i += 4) {
            binary += String.fromCharCode(data[i], data[i + 1], data[i + 2]);
        }
        return [canvas.width, canvas.height, btoa(binary)];
    """, image)
    with open(OUT + "/thumbnail.rgb", "wb") as file:
        file.write(base64.b64decode(pixels[2]))
    result["thumbnail"] = {"width": pixels[0], "height": pixels[1],
                           "time_ns": int(image.get_attribute("data-time")),
                           "pts_ns": int(image.get_attribute("data-pts")),
                           "stream": image.get_attribute("data-stream")}

    # Click: the frame view; → and ← step one stored frame.
    ActionChains(driver).move_to_element_with_offset(lane, hover, 0).click().perform()
    wait.until(lambda d: d.find_element(By.ID, "frame-caption").get_attribute("data-pts"))
    caption = driver.find_element(By.ID, "frame-caption")
    steps = [int(caption.get_attribute("data-pts"))]
    for key in [Keys.ARROW_RIGHT, Keys.ARROW_RIGHT, Keys.ARROW_LEFT]:
        before = caption.get_attribute("data-pts")
        ActionChains(driver).send_keys(key).perform()
        wait.until(lambda d: d.find_element(By.ID, "frame-caption").get_attribute("data-pts") != before)
        steps.append(int(driver.find_element(By.ID, "frame-caption").get_attribute("data-pts")))
    result["steps"] = steps
    result["caption"] = driver.find_element(By.ID, "frame-caption").text
    result["caption_wall"] = driver.find_element(By.ID, "frame-caption").get_attribute("data-wall")

    def fast_steps():
        """Ten → pressed at once step ten frames, and ten ← ten back: every press counts."""
        settled = "const done = arguments[arguments.length - 1]; state.steps.then(() => " \
            "done(document.getElementById('frame-caption').dataset.pts));"
        fast = [int(driver.execute_async_script(settled))]
        for key in [Keys.ARROW_RIGHT, Keys.ARROW_LEFT]:
            ActionChains(driver).send_keys(key * 10).perform()
            fast.append(int(driver.execute_async_script(settled)))
        result["fast_steps"] = fast
    part(driver, result, "fast steps", fast_steps)
    ActionChains(driver).send_keys(Keys.ESCAPE).perform()
    wait.until(lambda d: not d.find_element(By.ID, "frame-view").get_attribute("open"))

    # An answer that arrives after the events of the export it started does not take the save back to waiting.
    result["save_order"] = driver.execute_script("""
        noteSave({id: 9999, state: 'done', stream: 'front'});
        noteSave({id: 9999, state: 'waiting', stream: 'front'});
        const kept = state.saves.get(9999).state;
        state.saves.delete(9999);
        return kept;
    """)

    # Drag from 20 % to 75 % of what is recorded: the export dialog; export the front stream as .mkv.
    start, end = offset(0.2), offset(0.75)
    ActionChains(driver).move_to_element_with_offset(lane, start, 0).click_and_hold() \
        .move_by_offset(end - start, 0).release().perform()
    wait.until(lambda d: d.find_element(By.ID, "export-dialog").get_attribute("open"))
    for box in driver.find_elements(By.CSS_SELECTOR, "#export-streams input[type=checkbox]"):
        if box.get_attribute("value") != "front" and box.is_selected():
            box.click()
    driver.find_element(By.ID, "export-start").click()
    # The list is drawn again at every event: read it in one script, never through kept elements.
    done = "const li = document.querySelector('#save-list li[data-state=done]');" \
        " const a = li && li.querySelector('a.download'); return a ? [li.dataset.saveId, a.href] : null;"
    wait.until(lambda d: d.execute_script(done))
    export_id, href = driver.execute_script(done)
    export_id = int(export_id)
    result["export"] = json.loads(api("GET", "/v1/saves/%d" % export_id))
    result["export_link"] = href
    with open(OUT + "/export.mkv", "wb") as file:
        file.write(api("GET", "/v1/files/%d" % export_id))

    # A label that is markup is shown as text, and runs nothing.
    api("POST", "/v1/markers", {"label": XSS_LABEL})
    driver.refresh()
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#lanes [data-stream]")) >= 2)
    texts = "return [...document.querySelectorAll('#marker-list li')].map(li => li.textContent);"
    wait.until(lambda d: any(XSS_LABEL in text for text in d.execute_script(texts)))
    result["marker_texts"] = driver.execute_script(texts)
    result["xss_ran"] = driver.execute_script("return window.__xss === 1")
    result["injected_images"] = len(driver.find_elements(By.CSS_SELECTOR, "#marker-list img, .marker img"))
    time.sleep(1.2)  # the status panel fills from the event stream
    result["status_panel"] = text_of(driver, "status-list")
    result["legend"] = driver.execute_script(
        "return [...document.querySelectorAll('#legend span')].map(s => s.textContent);")
    result["zone_note"] = text_of(driver, "zone")
    driver.save_screenshot(OUT + "/timeline.png")

    def load_message():
        """A timeline that cannot be loaded says why (the recorder busy), and the message goes once a later load
        succeeds."""
        driver.execute_script("""
            state.follow = false;
            setView(0, state.liveEdge, false);
            window.__busy = true;
            if (!window.__realFetch) {
                window.__realFetch = window.fetch;
                window.fetch = (path, options) => window.__busy && String(path).includes('/rear/timeline')
                    ? Promise.resolve(new Response(JSON.stringify({error: {code: 'unavailable',
                        message: 'too many connections (at most 64); try again shortly'}}),
                        {status: 503, headers: {'Content-Type': 'application/json'}}))
                    : window.__realFetch(path, options);
            }
            say('');
        """)
        load = "const done = arguments[arguments.length - 1]; loadTimelines().then(() => done(), (e) => done(String(e)));"
        driver.execute_async_script(load)
        result["load_message_while_busy"] = text_of(driver, "message")
        driver.execute_script("window.__busy = false;")
        driver.execute_async_script(load)
        result["load_message_after"] = text_of(driver, "message")
        driver.execute_script("window.fetch = window.__realFetch; delete window.__realFetch;")
    part(driver, result, "load message", load_message)

    def long_label():
        """A label of 200 letters without a space stays inside its lane and the markers panel: the page never
        scrolls sideways."""
        long = "x" * 200
        marker = json.loads(api("POST", "/v1/markers", {"label": long, "at": "1s", "stream": "front"}))["markers"][0]
        driver.execute_script("state.follow = false; setView(0, state.liveEdge, false); loadTimelines();")
        shown = "return document.querySelector('.marker[data-marker-id=\"' + arguments[0] + '\"] span') !== null" \
            " && document.querySelector('#marker-list li[data-marker-id=\"' + arguments[0] + '\"]') !== null;"
        wait.until(lambda d: d.execute_script(shown, marker["id"]))
        result["long_label"] = driver.execute_script("""
            const root = document.documentElement, id = arguments[0];
            const lanes = document.getElementById('lanes').getBoundingClientRect();
            const item = document.querySelector('#marker-list li[data-marker-id="' + id + '"]');
            const label = document.querySelector('.marker[data-marker-id="' + id + '"] span').getBoundingClientRect();
            return {page_width: root.scrollWidth, window_width: root.clientWidth,
                    item_overflow: item.scrollWidth - item.clientWidth, label_right: label.right,
                    lanes_right: lanes.right, listed: item.textContent.includes('x'.repeat(200))};
        """, marker["id"])
        api("DELETE", "/v1/markers/%d" % marker["id"])
    part(driver, result, "long label", long_label)

    def crowded_labels():
        """Markers close together, zoomed out, never write their labels over the lane's name or over each other:
        what has no room is hidden, and the hover caption at its line names it; labels let the pointer through to
        the lane; a label's direction marks stay inside it in the markers panel."""
        ids = [json.loads(api("POST", "/v1/markers", {"label": "crowd %d" % i, "at": at, "stream": "front"}))
               ["markers"][0]["id"] for i, at in enumerate(["0s", "300ms", "400ms", "500ms", "600ms", "20s"])]
        driver.execute_script("state.follow = false; setView(0, 30e9, false); loadTimelines();")
        shown = "return arguments[0].every(id => document.querySelector('.marker[data-marker-id=\"' + id + '\"]'));"
        wait.until(lambda d: d.execute_script(shown, ids))
        result["crowded_labels"] = driver.execute_script("""
            const lane = document.querySelector('.lane[data-stream="front"]');
            const box = r => { const b = r.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; };
            const labels = arguments[0].map(id => {
                const line = lane.querySelector('.marker[data-marker-id="' + id + '"]'), span = line.querySelector('span');
                return {text: span.textContent, visible: !span.hidden && span.offsetWidth > 0, box: box(span)};
            });
            const shown = lane.querySelector('.marker span:not([hidden])').getBoundingClientRect();
            const under = document.elementFromPoint(shown.left + 3, shown.top + shown.height / 2);
            return {name: box(lane.querySelector('.lane-name')), labels, under_label: under.tagName};
        """, ids)
        canvas = driver.find_element(By.CSS_SELECTOR, '#lanes [data-stream="front"] canvas')
        ActionChains(driver).move_to_element_with_offset(canvas, lane_offset(driver, canvas, 400e6), 0).perform()
        wait.until(lambda d: "◆" in (text_of(d, "thumbnail-caption") or ""))
        result["crowded_labels"]["caption"] = text_of(driver, "thumbnail-caption")
        reversing = json.loads(api("POST", "/v1/markers", {"label": "held \u202e", "at": "1s", "stream": "front"}))
        reversing = reversing["markers"][0]["id"]
        isolated = "const item = document.querySelector('#marker-list li[data-marker-id=\"' + arguments[0] + '\"]');" \
            " return item && item.querySelector('bdi') ? item.querySelector('bdi').textContent : null;"
        driver.execute_script("loadTimelines();")
        wait.until(lambda d: d.execute_script(isolated, reversing) is not None)
        result["crowded_labels"]["isolated"] = driver.execute_script(isolated, reversing)
        ids.append(reversing)
        for id in ids:
            api("DELETE", "/v1/markers/%d" % id)
    part(driver, result, "crowded labels", crowded_labels)

    def page_edges():
        """Times past 100 s keep their milliseconds; a wheel event of any size leaves a view numbers describe; a
        busy recorder (503 unavailable) is not said to be stopping; an export with no stream chosen says so."""
        edges = driver.execute_script("""
            const before = [state.from, state.to];
            const lanes = document.getElementById('timeline'), box = lanes.getBoundingClientRect();
            lanes.dispatchEvent(new WheelEvent('wheel', {deltaY: 1e6, clientX: box.left + 100,
                clientY: box.top + 50, bubbles: true, cancelable: true}));
            return {seconds: formatSeconds(113712e6), tick: formatSeconds(113710e6, 1e7),
                    cut: formatSeconds(21333651668), cut_tick: formatSeconds(1999999999, 1e9),
                    finite: Number.isFinite(state.from) && Number.isFinite(state.to), zoomed_out: state.to - state.from
                    > before[1] - before[0]};
        """)
        driver.execute_script("""
            window.__fetchBeforeBusy = window.fetch;
            window.fetch = (path, options) => String(path).includes('/v1/health')
                ? Promise.resolve(new Response(JSON.stringify({error: {code: 'unavailable',
                    message: 'too many connections (at most 64); try again shortly'}}),
                    {status: 503, headers: {'Content-Type': 'application/json'}}))
                : window.__fetchBeforeBusy(path, options);
        """)
        driver.execute_async_script("const done = arguments[arguments.length - 1]; checkConnection().then(done, done);")
        edges["busy_banner"] = text_of(driver, "connection")
        # A 503 that is not the recorder's (a proxy's page while it is down) is not "busy".
        driver.execute_script("""
            window.fetch = (path, options) => String(path).includes('/v1/health')
                ? Promise.resolve(new Response('<html>down</html>', {status: 503}))
                : window.__fetchBeforeBusy(path, options);
        """)
        driver.execute_async_script("const done = arguments[arguments.length - 1]; checkConnection().then(done, done);")
        edges["proxy_503_state"] = driver.execute_script("return state.connection")
        driver.execute_script("window.fetch = window.__fetchBeforeBusy; delete window.__fetchBeforeBusy;")
        driver.execute_async_script("const done = arguments[arguments.length - 1]; checkConnection().then(done, done);")
        wait.until(lambda d: d.execute_script("return state.connection") == "live")
        saves = len(json.loads(api("GET", "/v1/saves"))["saves"])
        driver.execute_script("""
            say(''); openExport(1e9, 2e9);
            for (const box of document.querySelectorAll('#export-streams input')) box.checked = false;
        """)
        driver.find_element(By.ID, "export-start").click()
        wait.until(lambda d: "choose at least one stream" in (text_of(d, "message") or ""))
        edges["no_stream_message"] = text_of(driver, "message")
        edges["new_saves"] = len(json.loads(api("GET", "/v1/saves"))["saves"]) - saves
        # The next range starts with the recorded streams ticked again.
        driver.execute_script("openExport(1e9, 2e9);")
        edges["ticks_on_reopen"] = driver.execute_script(
            "return [...document.querySelectorAll('#export-streams input')].map(box => box.checked);")
        driver.execute_script("document.getElementById('export-dialog').close('cancel');")
        result["page_edges"] = edges
    part(driver, result, "page edges", page_edges)

    def several_files():
        """An export of several files (.y4m of every stream: a file per stream) offers a link per file, each
        serving its own file."""
        save = json.loads(api("POST", "/v1/clips", {"stream": "all", "from": "1s", "to": "2s", "format": "y4m",
                                                    "wait": True}))
        links = "const li = document.querySelector('#save-list li[data-save-id=\"' + arguments[0] + '\"]" \
            "[data-state=done]'); return li ? [...li.querySelectorAll('a.download')]" \
            ".map(a => [a.textContent, a.getAttribute('href')]) : null;"
        wait.until(lambda d: d.execute_script(links, save["id"]))
        shown = driver.execute_script(links, save["id"])
        served = driver.execute_async_script("""
            const done = arguments[arguments.length - 1];
            Promise.all(arguments[0].map(([, href]) => fetch(href, {method: 'HEAD'}).then((r) =>
                [r.status, r.headers.get('Content-Disposition'), Number(r.headers.get('Content-Length'))])))
                .then(done, (e) => done(String(e)));
        """, shown)
        result["several_files"] = {"files": save["files"], "links": shown, "served": served}
    part(driver, result, "several files", several_files)

    def before_zero():
        """Before recorder time 0 there is nothing: hovering, clicking and dragging there say so."""
        driver.execute_script("state.follow = false; setView(-20e9, 10e9, false);")
        lane = driver.find_element(By.CSS_SELECTOR, '#lanes [data-stream="front"] canvas')
        saves = len(json.loads(api("GET", "/v1/saves"))["saves"])
        ActionChains(driver).move_to_element_with_offset(lane, lane_offset(driver, lane, -5e9), 0).perform()
        wait.until(lambda d: "before" in text_of(d, "thumbnail-caption"))
        time.sleep(0.3)
        result["hover_before_zero"] = {"caption": text_of(driver, "thumbnail-caption"),
                                       "time": driver.find_element(By.ID, "thumbnail-image").get_attribute("data-time")}
        ActionChains(driver).move_to_element_with_offset(lane, lane_offset(driver, lane, -5e9), 0).click().perform()
        wait.until(lambda d: "no frame" in text_of(d, "message"))
        time.sleep(0.5)
        result["click_before_zero"] = {"message": text_of(driver, "message"),
                                       "frame_view_open": bool(driver.find_element(By.ID, "frame-view")
                                                               .get_attribute("open"))}
        # A frame shown afterwards, on another lane, takes the message about the missing one away.
        rear = driver.find_element(By.CSS_SELECTOR, '#lanes [data-stream="rear"] canvas')
        ActionChains(driver).move_to_element_with_offset(rear, lane_offset(driver, rear, 2e9), 0).click().perform()
        wait.until(lambda d: d.find_element(By.ID, "frame-view").get_attribute("open")
                   and d.find_element(By.ID, "frame-caption").get_attribute("data-stream") == "rear")
        result["message_after_a_frame"] = text_of(driver, "message")
        ActionChains(driver).send_keys(Keys.ESCAPE).perform()
        wait.until(lambda d: not d.find_element(By.ID, "frame-view").get_attribute("open"))
        start, end = lane_offset(driver, lane, -15e9), lane_offset(driver, lane, -2e9)
        ActionChains(driver).move_to_element_with_offset(lane, start, 0).click_and_hold() \
            .move_by_offset(end - start, 0).release().perform()
        wait.until(lambda d: "no frames in range" in text_of(d, "message"))
        time.sleep(0.5)
        result["drag_before_zero"] = {"message": text_of(driver, "message"),
                                      "export_dialog_open": bool(driver.find_element(By.ID, "export-dialog")
                                                                 .get_attribute("open")),
                                      "new_saves": len(json.loads(api("GET", "/v1/saves"))["saves"]) - saves}
    part(driver, result, "before zero", before_zero)

    def zoom_out():
        """Zooming out far past the widest view (7 days) around 15 s keeps 15 s where it was; the wall-clock labels
        of day-apart ticks differ."""
        driver.execute_script("setView(0, 30e9, false);")
        result["zoom"] = driver.execute_script("""
            const lanes = document.getElementById('lanes'), box = lanes.getBoundingClientRect();
            const x = box.left + box.width / 2, y = box.top + 10;
            const anchor = timeAt(x - box.left);
            for (let i = 0; i < 60; i++) {
                lanes.dispatchEvent(new WheelEvent('wheel', {deltaY: 500, clientX: x, clientY: y, bubbles: true,
                    cancelable: true}));
            }
            return {anchor, from: state.from, to: state.to, at_anchor: timeAt(x - box.left),
                    labels: state.axisLabels || null};
        """)
    part(driver, result, "zoom out", zoom_out)

    def save_seconds():
        """The save box sends whole milliseconds, never a number in exponent form, and refuses less than one; the
        marker label box takes as many characters as the API."""
        driver.execute_script("""
            window.__sent = [];
            window.__fetchBeforeSaves = window.fetch;
            window.fetch = (url, options) => {
                if (String(url).includes('/v1/saves') && options && options.body) window.__sent.push(options.body);
                return window.__fetchBeforeSaves(url, options);
            };
            document.getElementById('message').textContent = '';
        """)
        box = driver.find_element(By.ID, "save-seconds")
        box.clear()
        box.send_keys("0.0000001")
        driver.find_element(By.ID, "save-button").click()
        wait.until(lambda d: text_of(d, "message"))
        result["tiny_save_message"] = text_of(driver, "message")
        for value in ["0.25", "1e21"]:
            box.clear()
            box.send_keys(value)
            driver.find_element(By.ID, "save-button").click()
        wait.until(lambda d: d.execute_script("return window.__sent.length") >= 2)
        result["save_bodies"] = driver.execute_script("return window.__sent")
        # Typed as an input method types them: 256 characters outside the BMP (two UTF-16 units each) and 256
        # family emoji (seven units each, one character) are 256 characters, as the API counts them.
        label_box = driver.find_element(By.ID, "marker-label")
        typed = {}
        for name, character in [("astral", "\U0001F600"), ("family", "\U0001F468\u200D\U0001F469\u200D\U0001F467")]:
            label_box.clear()
            label_box.click()
            driver.execute_cdp_cmd("Input.insertText", {"text": character * 256})
            typed[name] = driver.execute_script("""
                const value = document.getElementById('marker-label').value;
                return {characters: [...new Intl.Segmenter().segment(value)].length,
                        bytes: new TextEncoder().encode(value).length};
            """)
        label_box.clear()
        result["label_typed"] = typed
        driver.execute_script("window.fetch = window.__fetchBeforeSaves;")
    part(driver, result, "save seconds", save_seconds)

    def without_cookie():
        """Without the token cookie, a click says the token is no longer accepted (not "no frame")."""
        driver.execute_script("setView(0, state.liveEdge, false);")
        driver.delete_all_cookies()
        say_nothing = "document.getElementById('message').textContent = '';"
        driver.execute_script(say_nothing)
        lane = driver.find_element(By.CSS_SELECTOR, '#lanes [data-stream="front"] canvas')
        ActionChains(driver).move_to_element_with_offset(lane, 0, 0).click().perform()
        wait.until(lambda d: text_of(d, "message"))
        result["message_without_cookie"] = text_of(driver, "message")
    part(driver, result, "without the cookie", without_cookie)

    def narrow():
        """In a window narrower than the thumbnail, the thumbnail starts at the lane's left edge, not off it."""
        driver.set_window_size(320, 1000)
        time.sleep(0.5)
        driver.execute_script("setView(0, state.liveEdge, false);")
        narrow_lane = driver.find_element(By.CSS_SELECTOR, '#lanes [data-stream="front"] canvas')
        ActionChains(driver).move_to_element_with_offset(
            narrow_lane, -narrow_lane.size["width"] // 2 + 40, 0).perform()
        wait.until(lambda d: not d.find_element(By.ID, "thumbnail").get_attribute("hidden"))
        result["narrow"] = {"lane_width": narrow_lane.size["width"],
                            "left": driver.execute_script("return document.getElementById('thumbnail').style.left;")}
        driver.set_window_size(1400, 1000)
        time.sleep(0.5)
    part(driver, result, "narrow window", narrow)

    def token_ways():
        """A token link opened from another site's page opens the timeline, also on a reload; the 401 page's token
        box opens it without the token in any address."""
        lanes = "return document.querySelectorAll('#lanes [data-stream]').length;"
        driver.delete_all_cookies()
        driver.get("data:text/html,<a id=open href='%s/?token=%s'>open</a>" % (BASE, urllib.parse.quote(TOKEN)))
        driver.find_element(By.ID, "open").click()
        wait.until(lambda d: d.current_url == BASE + "/" and d.execute_script(lanes) >= 2)
        driver.refresh()
        wait.until(lambda d: d.execute_script("return document.readyState") == "complete")
        time.sleep(1)
        ways = {"linked_title": driver.title, "reloaded_lanes": driver.execute_script(lanes)}
        driver.delete_all_cookies()
        driver.get(BASE + "/")
        ways["without_title"] = driver.title
        box = driver.find_element(By.NAME, "token")
        box.send_keys(TOKEN)
        box.submit()
        wait.until(lambda d: d.current_url == BASE + "/" and d.execute_script(lanes) >= 2)
        ways["form_url"] = driver.current_url
        ways["form_lanes"] = driver.execute_script(lanes)
        # Back does not land on a post to send again (the post's answer was a redirect).
        driver.back()
        time.sleep(1)
        ways["back_url"] = driver.current_url
        driver.get(BASE + "/")
        wait.until(lambda d: d.execute_script(lanes) >= 2)
        result["token_ways"] = ways
    part(driver, result, "token ways", token_ways)


def saves_scenario(driver, wait, result, pid):
    """Saves and exports as the page lists and draws them, on a recorder of front and rear whose store also holds
    "old", a stream of an earlier run; last, the recorder PID is stopped (SIGTERM) while a save waits."""
    driver.get(BASE + "/?token=" + TOKEN)
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#lanes [data-stream]")) >= 3)
    time.sleep(1.5)
    result["lanes"] = driver.execute_script(
        "return [...document.querySelectorAll('#lanes [data-stream]')].map(e => e.dataset.stream);")
    driver.execute_script("state.follow = false; setView(0, 30e9, false);")
    say_nothing = "document.getElementById('message').textContent = '';"

    def several_outcomes():
        """An export of several streams that fails for each says each stream's outcome, not only the last's: a
        range after every frame, as .y4m (a clip per stream)."""
        driver.execute_script(say_nothing + "openExport(3600e9, 3601e9);")
        wait.until(lambda d: d.find_element(By.ID, "export-dialog").get_attribute("open"))
        driver.execute_script("document.getElementById('export-format').value = 'y4m';")
        driver.find_element(By.ID, "export-start").click()
        wait.until(lambda d: "export of rear" in text_of(d, "message"))
        result["several_message"] = text_of(driver, "message")
    part(driver, result, "several outcomes", several_outcomes)

    bands = """return Object.fromEntries([...document.querySelectorAll('#lanes [data-stream]')].map(
        lane => [lane.dataset.stream, lane.querySelectorAll('.save-band').length]));"""

    def bands_of_all():
        """A save of `all` draws its band on the lanes of the streams it covers: the recorded ones while it waits
        (not the stored lane), its tracks once it has them."""
        save = json.loads(api("POST", "/v1/saves", {"stream": "all", "before": "1s", "after": "60s"}))
        wait.until(lambda d: d.execute_script("return (state.saves.get(arguments[0]) || {}).state === 'waiting';",
                                              save["id"]))
        driver.execute_script("renderSaves();")
        result["waiting_bands"] = driver.execute_script(bands)
        api("DELETE", "/v1/saves/%d" % save["id"])
        wait.until(lambda d: d.execute_script("return (state.saves.get(arguments[0]) || {}).state === 'cancelled';",
                                              save["id"]))
        result["bands_after_cancel"] = driver.execute_script(bands)
        # One exporting with its tracks known (an object as the API gives it): on those lanes only.
        driver.execute_script("""
            noteSave({id: 9990, state: 'exporting', stream: 'all', from_ns: 1e9, to_ns: 2e9, format: 'mkv',
                      files: [], progress: 0.5, tracks: ['rear']});
            renderSaves();
        """)
        result["tracks_bands"] = driver.execute_script(bands)
        driver.execute_script("state.saves.delete(9990); renderSaves();")
    part(driver, result, "bands of all", bands_of_all)

    def every_save_listed():
        """The exports panel lists every save the recorder lists, more than 20 too, newest first; the panel
        scrolls."""
        for _ in range(25):
            api("POST", "/v1/saves", {"stream": "front", "last": "100ms", "wait": True})
        listed = len(json.loads(api("GET", "/v1/saves"))["saves"])
        count = "return document.querySelectorAll('#save-list li').length;"
        try:
            WebDriverWait(driver, 20, poll_frequency=0.2).until(lambda d: d.execute_script(count) >= listed)
        except Exception:  # noqa: BLE001 - the counts say what the page shows
            pass
        result["every_save"] = driver.execute_script("""
            const panel = document.getElementById('save-list');
            const ids = [...panel.querySelectorAll('li')].map(li => Number(li.dataset.saveId));
            return {page: ids.length, newest_first: ids.every((id, i) => i === 0 || ids[i - 1] > id),
                    scrolls: panel.scrollHeight > panel.clientHeight || panel.parentElement.scrollHeight >
                        panel.parentElement.clientHeight};
        """)
        result["every_save"]["api"] = listed
    part(driver, result, "every save listed", every_save_listed)

    # The recorder stops (SIGTERM) while a save of every stream waits for its post-roll: it writes the save with what
    # was recorded, and the page, still listening after `stopping`, shows it done with its file.
    save = json.loads(api("POST", "/v1/saves", {"stream": "all", "before": "1s", "after": "60s"}))
    state_of = "return (state.saves.get(arguments[0]) || {}).state;"
    wait.until(lambda d: d.execute_script(state_of, save["id"]) == "waiting")
    os.kill(pid, signal.SIGTERM)
    wait.until(lambda d: d.execute_script("return state.connection") != "live")
    result["stopping_connection"] = driver.execute_script("return state.connection")
    result["stopping_banner"] = text_of(driver, "connection")
    try:
        WebDriverWait(driver, 60, poll_frequency=0.2).until(lambda d: d.execute_script(state_of, save["id"]) == "done")
    except Exception:  # noqa: BLE001 - the state says what the page shows
        pass
    WebDriverWait(driver, 120, poll_frequency=0.2).until(lambda d: exited(pid))
    result["stopped_save"] = driver.execute_script("""
        const save = state.saves.get(arguments[0]) || {};
        const item = document.querySelector('#save-list li[data-save-id="' + arguments[0] + '"]');
        return {state: save.state, files: save.files || [], shown: item ? item.dataset.state : null,
                link: !!(item && item.querySelector('a.download'))};
    """, save["id"])
    wait.until(lambda d: d.execute_script("return state.connection") == "lost")
    result["connection_after_stop"] = driver.execute_script("return state.connection")

def exited(pid):
    """Whether PID has exited (gone, or a zombie its parent has not reaped yet)."""
    try:
        with open("/proc/%d/stat" % pid) as file:
            return file.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def restart_scenario(driver, wait, result, pid, command):
    driver.get(BASE + "/?token=" + TOKEN)
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#lanes [data-stream]")) >= 2)
    time.sleep(1.5)
    result["lanes_before"] = driver.execute_script(
        "return [...document.querySelectorAll('#lanes [data-stream]')].map(e => e.dataset.stream);")
    # A save of this run, which the page lists.
    api("POST", "/v1/saves", {"last": "500ms", "wait": True})
    wait.until(lambda d: d.execute_script("return state.saves.size") >= 1)

    # SIGSTOP: the recorder keeps its connections and answers nothing; the page notices the silence, says so, and
    # is back once the recorder runs again.
    os.kill(pid, signal.SIGSTOP)
    try:
        WebDriverWait(driver, 60, poll_frequency=0.2).until(
            lambda d: d.execute_script("return state.connection") == "silent")
        result["silent"] = driver.execute_script("""
            const banner = document.getElementById('connection');
            return {banner: banner.textContent, banner_hidden: banner.hidden,
                    status_stale: document.getElementById('status').classList.contains('stale')};
        """)
    finally:
        os.kill(pid, signal.SIGCONT)
    WebDriverWait(driver, 60, poll_frequency=0.2).until(
        lambda d: d.execute_script("return state.connection") == "live")
    result["resumed_banner_hidden"] = driver.execute_script("return document.getElementById('connection').hidden")

    # SIGTERM: the recorder stops; the page says so and keeps saying so.
    os.kill(pid, signal.SIGTERM)
    wait.until(lambda d: d.execute_script("return state.connection") == "lost")
    WebDriverWait(driver, 120, poll_frequency=0.2).until(lambda d: exited(pid))
    time.sleep(6)
    result["stopped"] = driver.execute_script("""
        const banner = document.getElementById('connection');
        return {banner: banner.textContent, banner_hidden: banner.hidden,
                message: document.getElementById('message').textContent,
                status_stale: document.getElementById('status').classList.contains('stale'),
                status_heading: document.querySelector('#status h2').textContent,
                lanes_stale: document.getElementById('lanes').classList.contains('stale'),
                retry_delay_ms: state.retryDelay};
    """)
    lane = driver.find_element(By.CSS_SELECTOR, '#lanes [data-stream="front"] canvas')
    driver.execute_script("document.getElementById('message').textContent = '';")
    ActionChains(driver).move_to_element_with_offset(lane, 0, 0).click().perform()
    wait.until(lambda d: text_of(d, "message"))
    result["click_while_stopped"] = text_of(driver, "message")

    # The recorder again, on the same store and port, with a new stream whose input fails.
    recorder = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=open(OUT + "/restart.log", "w"))
    try:
        WebDriverWait(driver, 120, poll_frequency=0.2).until(lambda d: d.execute_script(
            "return state.connection === 'live' && !!document.querySelector('#lanes [data-stream=side]');"))
        result["back_message"] = text_of(driver, "message")
        # The new run's saves replace the old run's (their ids start again, their downloads are gone).
        result["saves_after_restart"] = driver.execute_script("return state.saves.size")
        result["failed_before_the_page_was_back"] = "input failed" in text_of(driver, "status-list")
        # Its input fails while the page watches: the input_failed event says so.
        WebDriverWait(driver, 120, poll_frequency=0.2).until(
            lambda d: "input failed" in text_of(d, "status-list") and "input failed" in text_of(d, "message"))
        time.sleep(1.5)  # a timeline load
        result["restarted"] = driver.execute_script("""
            const banner = document.getElementById('connection');
            const colour = GAP_COLOURS['input failed'] || '#f8fafc';
            const [r, g, b] = [1, 3, 5].map(i => parseInt(colour.slice(i, i + 2), 16));
            const canvas = document.querySelector('#lanes [data-stream=side] canvas');
            const data = canvas.getContext('2d').getImageData(0, 42, canvas.width, 2).data;
            let drawn = 0;
            for (let i = 0; i < data.length; i += 4) {
                if (data[i] === r && data[i + 1] === g && data[i + 2] === b) drawn++;
            }
            return {banner: banner.textContent, banner_hidden: banner.hidden,
                    message: document.getElementById('message').textContent,
                    status_stale: document.getElementById('status').classList.contains('stale'),
                    lanes: [...document.querySelectorAll('#lanes [data-stream]')].map(e => e.dataset.stream),
                    status_panel: document.getElementById('status-list').textContent,
                    side_lane_error: document.querySelector('#lanes [data-stream=side] .lane-error')?.textContent,
                    rear_label: document.querySelector('#lanes [data-stream=rear] .lane-name')?.textContent,
                    export_streams: [...document.querySelectorAll('#export-streams input')].map(e => e.value),
                    export_checked: [...document.querySelectorAll('#export-streams input')].map(e => e.checked),
                    rear_timeline_buckets: ((state.timelines.get('rear') || {}).buckets || []).length,
                    input_failed_colour: colour, input_failed_pixels: drawn};
        """)

        # The stored camera's first second exported from the page: tick it alone, export; the recorder reads it
        # from the disk.
        driver.execute_script("openExport(0, 1e9);")
        wait.until(lambda d: d.find_element(By.ID, "export-dialog").get_attribute("open"))
        for box in driver.find_elements(By.CSS_SELECTOR, "#export-streams input[type=checkbox]"):
            if box.is_selected() != (box.get_attribute("value") == "rear"):
                box.click()
        driver.find_element(By.ID, "export-start").click()
        done = "const li = document.querySelector('#save-list li[data-state=done]'); return li ? li.dataset.saveId : null;"
        WebDriverWait(driver, 120, poll_frequency=0.2).until(lambda d: d.execute_script(done))
        result["stored_export"] = json.loads(api("GET", "/v1/saves/%s" % driver.execute_script(done)))

        # kill -9: no "stopping" first; the page finds the recorder gone all the same.
        recorder.kill()
        recorder.wait(timeout=60)
        wait.until(lambda d: d.execute_script("return state.connection") == "lost")
        result["killed_banner"] = text_of(driver, "connection")
    finally:
        recorder.send_signal(signal.SIGINT)
        try:
            recorder.wait(timeout=120)
        except subprocess.TimeoutExpired:
            recorder.kill()
            recorder.wait(timeout=60)


def main():
    options = Options()
    options.binary_location = "/usr/bin/chromium"
    for argument in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000",
                     "--disable-gpu"]:
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    driver.set_page_load_timeout(60)
    result = {}
    wait = WebDriverWait(driver, 60, poll_frequency=0.1)
    driver.set_script_timeout(60)
    try:
        if SCENARIO == "saves":
            saves_scenario(driver, wait, result, int(sys.argv[5]))
        elif SCENARIO == "restart":
            restart_scenario(driver, wait, result, int(sys.argv[5]), json.loads(sys.argv[6]))
        else:
            page_scenario(driver, wait, result)
    except Exception as error:  # noqa: BLE001 - reported to the Swift test, which fails with it
        result["error"] = "%s: %s" % (type(error).__name__, error)
        try:
            driver.save_screenshot(OUT + "/failure.png")
            result["console"] = driver.get_log("browser")
        except Exception:  # noqa: BLE001
            pass
    finally:
        driver.quit()
    print(json.dumps(result))


main()
