#!/usr/bin/env python3
"""Drives a live recorder's timeline page in headless Chromium (Debian's chromium, chromium-driver and
python3-selenium) and prints what it saw as one JSON object; the Swift test checks it against the store.

usage: timeline_page.py BASE_URL TOKEN OUTPUT_DIR

It loads the page with ?token= once, reads the lanes, hovers over the "front" lane and saves the thumbnail's
pixels, opens the frame view and steps with the arrow keys, drags a range on the "front" lane and exports it as
.mkv (downloaded by id), adds a marker whose label is markup and reloads to see it shown as text, and saves a
screenshot.
"""
import base64
import json
import sys
import time
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

BASE, TOKEN, OUT = sys.argv[1], sys.argv[2], sys.argv[3]
XSS_LABEL = '<img src=x onerror="window.__xss=1">bold <b>not</b>'


def api(method, path, body=None):
    request = urllib.request.Request(BASE + path, method=method, headers={"Authorization": "Bearer " + TOKEN})
    if body is not None:
        request.data = json.dumps(body).encode()
        request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.read()


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
    try:
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
        ActionChains(driver).send_keys(Keys.ESCAPE).perform()
        wait.until(lambda d: not d.find_element(By.ID, "frame-view").get_attribute("open"))

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
        result["status_panel"] = driver.execute_script("return document.getElementById('status-list').textContent;")
        driver.save_screenshot(OUT + "/timeline.png")
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
