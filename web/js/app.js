// @ts-check
// The dashboard's entry: finds out whether a session is open, then shows the page the hash names.
import { api, onSessionLost } from './api.js'
import { announce, clear, errorBox, h, loading } from './dom.js'
import { createRouter } from './router.js'
import * as account from './pages/account.js'
import * as auth from './pages/auth.js'
import * as domains from './pages/domains.js'
import * as emails from './pages/emails.js'
import * as keys from './pages/keys.js'
import * as overview from './pages/overview.js'
import * as received from './pages/received.js'
import * as suppressions from './pages/suppressions.js'
import * as templates from './pages/templates.js'
import * as webhooks from './pages/webhooks.js'

const routes = [
  { path: '/login', title: 'Log in', page: auth.login, public: true },
  { path: '/signup', title: 'Sign up', page: auth.signup, public: true },
  { path: '/', title: 'Overview', page: overview.render, nav: 'overview' },
  { path: '/emails', title: 'Emails', page: emails.list, nav: 'emails' },
  { path: '/emails/:id', title: 'Email', page: emails.detail, nav: 'emails' },
  { path: '/keys', title: 'API keys', page: keys.render, nav: 'keys' },
  { path: '/webhooks', title: 'Webhooks', page: webhooks.list, nav: 'webhooks' },
  { path: '/webhooks/:id', title: 'Webhook', page: webhooks.detail, nav: 'webhooks' },
  { path: '/domains', title: 'Domains', page: domains.list, nav: 'domains' },
  { path: '/domains/:id', title: 'Domain', page: domains.detail, nav: 'domains' },
  { path: '/received', title: 'Received', page: received.list, nav: 'received' },
  { path: '/received/:id', title: 'Received message', page: received.detail, nav: 'received' },
  { path: '/templates', title: 'Templates', page: templates.list, nav: 'templates' },
  { path: '/templates/:id', title: 'Template', page: templates.detail, nav: 'templates' },
  { path: '/suppressions', title: 'Suppressions', page: suppressions.render, nav: 'suppressions' },
  { path: '/account', title: 'Account', page: account.render, nav: 'account' },
]

const main = document.getElementById('main')
const nav = document.getElementById('nav')
const who = document.getElementById('who')
const whoEmail = document.getElementById('who-email')
const sandbox = document.getElementById('sandbox')

/** What every page gets: the account (null when logged out), navigation, and a way to refresh it. */
const ctx = {
  account: null,
  router: null,
  async refreshAccount () {
    try {
      ctx.account = (await api.get('/api/account', { quiet401: true })).data
    } catch (err) {
      if (err.status !== 401) throw err
      ctx.account = null
    }
    showChrome()
    return ctx.account
  },
  signedIn (account) {
    ctx.account = account
    showChrome()
    // Login answers the account without its transport: the banner comes with the full account.
    ctx.refreshAccount().catch(() => {})
  },
  /** True while nothing leaves the machine (SMTP_URL unset): outcomes are the sandbox's. */
  get sandbox () { return ctx.account?.transport === 'sandbox' },
}

function showChrome () {
  const on = ctx.account !== null
  nav.hidden = !on
  who.hidden = !on
  whoEmail.textContent = on ? ctx.account.email : ''
  sandbox.hidden = !(on && ctx.account.transport === 'sandbox')
}

let renderCount = 0
async function onRoute ({ route, params, query, path }) {
  const mine = ++renderCount
  if (route === null) {
    clear(main).append(h('h1', { tabindex: '-1', class: 'page-title' }, 'Not found'), h('p', {}, h('a', { href: '#/' }, 'Go to the overview')))
    focusTitle()
    return
  }
  if (!route.public && ctx.account === null) {
    ctx.router.go('/login', { next: location.hash.slice(1) || '/' }, { replace: true })
    return
  }
  if (route.public && ctx.account !== null) {
    ctx.router.go('/', undefined, { replace: true })
    return
  }
  for (const a of nav.querySelectorAll('a[data-nav]')) {
    if (!(a instanceof HTMLElement)) continue
    if (a.dataset.nav === route.nav) a.setAttribute('aria-current', 'page')
    else a.removeAttribute('aria-current')
  }
  document.title = `${route.title} · svc`
  const view = h('div', { class: 'page' })
  clear(main).append(loading())
  try {
    await route.page(view, { ...ctx, params, query, path, isCurrent: () => mine === renderCount })
  } catch (err) {
    if (mine !== renderCount) return
    clear(view).append(h('h1', { tabindex: '-1', class: 'page-title' }, route.title), errorBox(err))
  }
  if (mine !== renderCount) return
  clear(main).append(view)
  focusTitle()
}

/** Moves focus to the new page's heading, so keyboard and screen-reader users start there. */
function focusTitle () {
  const title = main.querySelector('h1')
  if (title) title.focus({ preventScroll: false })
  else main.focus()
}

document.getElementById('skip').addEventListener('click', (event) => {
  event.preventDefault()
  focusTitle()
})

document.getElementById('logout').addEventListener('click', async () => {
  try {
    await api.post('/api/auth/logout')
  } catch (err) {
    if (err.status !== 401) { announce(err.message, 'danger'); return }
  }
  ctx.account = null
  showChrome()
  announce('You are logged out')
  ctx.router.go('/login')
})

onSessionLost(() => {
  if (ctx.account === null) return
  ctx.account = null
  showChrome()
  announce('Your session has ended; log in again', 'warn')
  ctx.router.go('/login', { next: location.hash.slice(1) || '/' })
})

async function start () {
  ctx.router = createRouter(routes, onRoute)
  try {
    await ctx.refreshAccount()
  } catch (err) {
    clear(main).append(h('h1', { tabindex: '-1', class: 'page-title' }, 'svc'), errorBox(err))
    return
  }
  ctx.router.resolve()
}

start()
