// @ts-check
// Sign up and log in. Both open a session (the HttpOnly cookie the API sets) and go where the person
// was heading.
import { api } from '../api.js'
import { announce, h } from '../dom.js'
import { field, form, rules } from '../form.js'

/**
 * @param {HTMLElement} view
 * @param {any} ctx the page context (app.js)
 * @param {{ title: string, intro: string, submitLabel: string, path: string, switchText: string, switchHref: string, switchLabel: string, passwordHint?: string }} page
 */
function authPage (view, ctx, { title, intro, submitLabel, path, switchText, switchHref, switchLabel, passwordHint }) {
  const email = field({ name: 'email', label: 'Email', type: 'email', autocomplete: 'email', required: true, validate: rules.email })
  const password = field({
    name: 'password', label: 'Password', type: 'password', required: true, hint: passwordHint,
    autocomplete: path.endsWith('signup') ? 'new-password' : 'current-password', validate: rules.password,
  })
  const f = form({
    fields: [email, password],
    submitLabel,
    busyLabel: 'One moment…',
    submit: async (values) => {
      const res = await api.post(path, { email: values.email.trim(), password: values.password })
      ctx.signedIn(res.data)
      await ctx.refreshAccount()
      announce(res.message)
      const next = typeof ctx.query.next === 'string' && ctx.query.next.startsWith('/') && !ctx.query.next.startsWith('/log') ? ctx.query.next : '/'
      ctx.router.go(next)
    },
  })
  view.classList.add('auth-page')
  view.append(h('div', { class: 'auth-card card' },
    h('h1', { tabindex: '-1', class: 'page-title' }, title),
    h('p', { class: 'muted' }, intro),
    f.el,
    h('p', { class: 'switch' }, switchText, ' ', h('a', { href: switchHref }, switchLabel)),
  ))
}

export async function login (view, ctx) {
  authPage(view, ctx, {
    title: 'Log in to svc', intro: 'Send email, watch its delivery, and manage your keys and webhooks.',
    submitLabel: 'Log in', path: '/api/auth/login',
    switchText: 'No account yet?', switchHref: '#/signup', switchLabel: 'Sign up',
  })
}

export async function signup (view, ctx) {
  authPage(view, ctx, {
    title: 'Create your svc account', intro: 'An email address and a password is all it takes.',
    submitLabel: 'Sign up', path: '/api/auth/signup', passwordHint: '10 to 200 characters.',
    switchText: 'Already have an account?', switchHref: '#/login', switchLabel: 'Log in',
  })
}
